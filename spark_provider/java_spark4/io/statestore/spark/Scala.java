package io.statestore.spark;

import java.util.Iterator;
import java.util.function.Function;
import org.apache.spark.sql.execution.streaming.state.StateStoreIterator;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.BoxedUnit;

/** The few conversions a Java class needs to speak Scala's collection types. */
final class Scala {
  private Scala() {}

  static <A> scala.collection.Iterator<A> iterator(Iterator<A> it) {
    return CollectionConverters.asScala(it);
  }

  static <A> StateStoreIterator<A> storeIterator(Iterator<A> it, Runnable onClose) {
    return new StateStoreIterator<>(CollectionConverters.asScala(it), () -> {
      onClose.run();
      return BoxedUnit.UNIT;
    });
  }

  static <A> scala.collection.immutable.Seq<A> seq(java.util.List<A> list) {
    return CollectionConverters.asScala(list).toSeq();
  }

  static <A> scala.collection.immutable.Set<A> set(java.util.Set<A> set) {
    return CollectionConverters.asScala(set).toSet();
  }

  @SuppressWarnings("unchecked")
  static <K, V> scala.collection.immutable.Map<K, V> map(java.util.Map<K, V> map) {
    return (scala.collection.immutable.Map<K, V>) scala.collection.immutable.Map$.MODULE$.from(
        CollectionConverters.asScala(map));
  }

  static <A, B> Iterator<B> mapped(Iterator<A> it, Function<A, B> f) {
    return new Iterator<>() {
      @Override
      public boolean hasNext() {
        return it.hasNext();
      }

      @Override
      public B next() {
        return f.apply(it.next());
      }
    };
  }
}
