package io.statestore.spark;

import java.util.Iterator;
import scala.collection.JavaConverters;

/** The few conversions a Java class needs to speak Scala 2.12's collection types (Spark 3.5). */
final class Scala {
  private Scala() {}

  static <A> scala.collection.Iterator<A> iterator(Iterator<A> it) {
    return JavaConverters.asScalaIteratorConverter(it).asScala();
  }

  static <A> scala.collection.Seq<A> seq(java.util.List<A> list) {
    return JavaConverters.asScalaBufferConverter(list).asScala().toSeq();
  }

  static <K, V> scala.collection.immutable.Map<K, V> map(java.util.Map<K, V> map) {
    scala.collection.immutable.Map<K, V> out = scala.collection.immutable.Map$.MODULE$.empty();
    for (java.util.Map.Entry<K, V> e : map.entrySet()) out = out.updated(e.getKey(), e.getValue());
    return out;
  }
}
