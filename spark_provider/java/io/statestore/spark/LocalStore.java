package io.statestore.spark;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.rocksdb.BlockBasedTableConfig;
import org.rocksdb.BloomFilter;
import org.rocksdb.Cache;
import org.rocksdb.Checkpoint;
import org.rocksdb.ColumnFamilyDescriptor;
import org.rocksdb.ColumnFamilyHandle;
import org.rocksdb.ColumnFamilyOptions;
import org.rocksdb.CompressionType;
import org.rocksdb.DBOptions;
import org.rocksdb.FlushOptions;
import org.rocksdb.LRUCache;
import org.rocksdb.WriteBufferManager;
import org.rocksdb.Options;
import org.rocksdb.ReadOptions;
import org.rocksdb.RocksDB;
import org.rocksdb.RocksDBException;
import org.rocksdb.RocksIterator;
import org.rocksdb.Snapshot;
import org.rocksdb.WriteBatch;
import org.rocksdb.WriteOptions;

/**
 * One store partition's local RocksDB (formats.md section 2): user column families as physical ones,
 * bookkeeping in {@code __statestore_meta}, exact key counts, and the change set of the commit in progress.
 *
 * <p>A batch's puts and deletes stay in the change set, which answers the batch's reads of the keys it wrote,
 * until commit: once the increment is encoded they go into the database as one write batch in key order, on a
 * background thread ({@link #finishCommit}), and every later use of the database waits for it. A scan or a merge
 * writes what is pending first (a RocksDB iterator sees the database only). The database has no WAL: the
 * directory is a cache of the checkpoint location, trusted only while this JVM holds it. A batch's writes stay
 * revertible: {@link #beginBatch} pins a RocksDB snapshot of the committed version, and {@link #rollback} writes
 * back, for each key the batch changed, its value in that snapshot: time proportional to the batch, not to the
 * state.
 */
final class LocalStore implements AutoCloseable {
  static final String META_CF = IncrementLayout.META_COLUMN_FAMILY;
  static final String DEFAULT_CF = "default";
  private static final byte[] VERSION_KEY = ascii("version");
  private static final byte[] STORE_ID_KEY = ascii("store_id");
  private static final byte[] LINEAGE_KEY = ascii("lineage");
  private static final String COUNT_PREFIX = "count/";

  static {
    RocksDB.loadLibrary();
  }

  /** The block cache of every store of this JVM; in bounded mode their write buffers are charged to it too. */
  private static volatile Cache sharedCache;
  /** Bounded mode ({@code memoryBudgetMB} over 0): the write buffer manager every store's memtables count against,
   * at most half the budget, charged to {@link #sharedCache}: RocksDB flushes the largest memtables beyond it. */
  private static volatile WriteBufferManager sharedWriteBuffers;
  /** Stores open in this JVM: each reports its share of the shared memory ({@link #memoryShare}). */
  private static final java.util.concurrent.atomic.AtomicInteger OPEN = new java.util.concurrent.atomic.AtomicInteger();
  /**
   * L0 files before RocksDB compacts them into the level below (its default: 4). A partition's L0 files come from
   * its snapshots' flushes, one per {@code minDeltasForSnapshot} versions, and a copy a node makes of its replica
   * (a hand-over, a failover) adds one: at 4, a copy opened ahead of a move often rewrote the whole partition the
   * moment it opened, in the migration's micro-batch, and the node's replica did the same work again. Point
   * lookups probe each L0 file's bloom filter first, so a few more files cost little.
   */
  static final int LEVEL0_COMPACTION_TRIGGER = 8;
  /** Memtable arena blocks in bounded mode (RocksDB's default: 1 MiB at 64 MiB write buffers). */
  static final long BOUNDED_ARENA_BLOCK_BYTES = 64 * 1024;
  /** Below this many bytes of SST files a store is compacted before each snapshot ({@link #flushForSnapshot}). */
  static final long COMPACT_FOR_SNAPSHOT_BYTES = 16L << 20;


  final File dir;
  final String storeId;
  private final ProviderSettings settings;
  private final RocksDB db;
  private final DBOptions dbOptions;
  private final ColumnFamilyOptions cfOptions;
  private final WriteOptions writeOptions;
  private final Map<String, ColumnFamilyHandle> handles = new HashMap<>();
  /** Guards column family handles against a background flush (families are created and dropped rarely). */
  private final Object cfLock = new Object();
  private final Map<String, long[]> counts = new HashMap<>();
  private ChangeSet changes = new ChangeSet();
  /** The last commit's writes, until {@link #startWrites} hands them to a writer thread (null: none waiting). */
  private volatile java.util.concurrent.FutureTask<Void> unstartedWrites;
  /** The last commit's writes on their way into the database (null before any). */
  private volatile java.util.concurrent.Future<?> writing;
  /** Why the last commit's writes did not reach the database (null: they did, or are on their way). */
  private volatile String writeFailure;
  /** What the task's reads found, so that its writes need no second lookup for the count (KeyPresence). */
  private final KeyPresence presence = new KeyPresence();
  private long version;
  /** Lineage of the committed version (formats.md 3.4); null: not known. */
  private byte[] lineage;
  /** The committed version as the batch in progress found it, and its counts: what a rollback restores. */
  private Snapshot batchStart;
  private Map<String, Long> countsAtBatchStart;

  private LocalStore(File dir, String storeId, ProviderSettings settings) throws RocksDBException {
    this.dir = dir;
    this.storeId = storeId;
    this.settings = settings;
    // Opening is on a moved partition's critical path (a replica's checkpoint, a restored snapshot): skip the
    // work RocksDB does at open for every SST file only to tune compaction (table properties, file sizes).
    this.dbOptions = new DBOptions().setCreateIfMissing(true).setCreateMissingColumnFamilies(true)
        .setMaxOpenFiles(-1).setMaxBackgroundJobs(2).setSkipStatsUpdateOnDbOpen(true)
        .setSkipCheckingSstFileSizesOnDbOpen(true);
    this.cfOptions = columnFamilyOptions(settings);
    if (sharedWriteBuffers != null) dbOptions.setWriteBufferManager(sharedWriteBuffers);
    this.writeOptions = new WriteOptions().setDisableWAL(true).setSync(false);
    List<String> names = new ArrayList<>();
    names.add(DEFAULT_CF);
    names.add(META_CF);
    if (new File(dir, "CURRENT").exists()) {
      try (Options o = new Options()) {
        for (byte[] n : RocksDB.listColumnFamilies(o, dir.getPath())) {
          String s = new String(n, StandardCharsets.UTF_8);
          if (!names.contains(s)) names.add(s);
        }
      }
    }
    List<ColumnFamilyDescriptor> descriptors = new ArrayList<>();
    for (String n : names) descriptors.add(new ColumnFamilyDescriptor(n.getBytes(StandardCharsets.UTF_8), cfOptions));
    List<ColumnFamilyHandle> hs = new ArrayList<>();
    dir.mkdirs();
    this.db = RocksDB.open(dbOptions, dir.getPath(), descriptors, hs);
    OPEN.incrementAndGet();
    for (int i = 0; i < names.size(); i++) handles.put(names.get(i), hs.get(i));
    try {
      loadMeta();
    } catch (RocksDBException | RuntimeException e) {
      // Nobody holds this store yet to close it: a damaged meta column family must not leave the database open.
      closeDatabase();
      throw e;
    }
  }

  /** Opens the database in {@code dir}, creating an empty store at version 0 when there is none. */
  static LocalStore open(File dir, String storeId, ProviderSettings settings) throws IOException {
    try {
      return new LocalStore(dir, storeId, settings);
    } catch (RocksDBException e) {
      throw new IOException("Cannot open local store " + dir + ": " + e.getMessage(), e);
    }
  }

  private static ColumnFamilyOptions columnFamilyOptions(ProviderSettings s) {
    if (sharedCache == null) {
      synchronized (LocalStore.class) {
        if (sharedCache == null) {
          if (s.memoryBudgetMb > 0) {
            // As Spark's RocksDB provider's bounded mode: one cache holds blocks, index and filter blocks (high
            // priority) and, through the write buffer manager, the memtables.
            long budget = s.memoryBudgetMb * 1024L * 1024L;
            sharedCache = new LRUCache(budget, -1, false, 0.1);
            sharedWriteBuffers = new WriteBufferManager(budget / 2, sharedCache);
          } else {
            sharedCache = new LRUCache(s.blockCacheSizeMb * 1024L * 1024L);
          }
        }
      }
    }
    BlockBasedTableConfig table = new BlockBasedTableConfig().setBlockCache(sharedCache)
        .setFilterPolicy(new BloomFilter(10, false)).setBlockSize(16 * 1024);
    if (sharedWriteBuffers != null) {
      table.setCacheIndexAndFilterBlocks(true).setCacheIndexAndFilterBlocksWithHighPriority(true)
          .setPinL0FilterAndIndexBlocksInCache(true);
    }
    ColumnFamilyOptions options = new ColumnFamilyOptions().setTableFormatConfig(table)
        .setCompressionType(CompressionType.LZ4_COMPRESSION)
        .setWriteBufferSize(s.writeBufferSizeMb * 1024L * 1024L)
        .setLevel0FileNumCompactionTrigger(LEVEL0_COMPACTION_TRIGGER);
    // The write buffer manager counts a memtable's arena blocks as allocated, and every memtable that was written
    // holds one: at RocksDB's 1 MiB, an executor's 400 memtables (200 partitions, two column families each) were
    // already over the budget's half, and every write flushed (976 flushes in six micro-batches).
    if (sharedWriteBuffers != null) options.setArenaBlockSize(BOUNDED_ARENA_BLOCK_BYTES);
    return options;
  }

  private void loadMeta() throws RocksDBException {
    ColumnFamilyHandle meta = handles.get(META_CF);
    byte[] v = db.get(meta, VERSION_KEY);
    if (v == null) {
      try (WriteBatch b = new WriteBatch()) {
        b.put(meta, VERSION_KEY, u64(0));
        b.put(meta, LINEAGE_KEY, IncrementCodec.EMPTY_LINEAGE);
        b.put(meta, STORE_ID_KEY, storeId.getBytes(StandardCharsets.UTF_8));
        db.write(writeOptions, b);
      }
      version = 0;
      lineage = IncrementCodec.EMPTY_LINEAGE;
    } else {
      version = ByteBuffer.wrap(v).getLong();
      byte[] l = db.get(meta, LINEAGE_KEY);
      // A store written before lineages existed, past version 0: which history it holds is not known.
      lineage = l != null && l.length == IncrementCodec.LINEAGE_BYTES ? l
          : (version == 0 ? IncrementCodec.EMPTY_LINEAGE : null);
      byte[] id = db.get(meta, STORE_ID_KEY);
      String found = id == null ? null : new String(id, StandardCharsets.UTF_8);
      if (!storeId.equals(found)) {
        throw new RocksDBException("local store " + dir + " belongs to store '" + found + "', not '" + storeId + "'");
      }
    }
    try (RocksIterator it = db.newIterator(meta)) {
      byte[] prefix = ascii(COUNT_PREFIX);
      for (it.seek(prefix); it.isValid() && startsWith(it.key(), prefix); it.next()) {
        String cf = new String(it.key(), prefix.length, it.key().length - prefix.length, StandardCharsets.UTF_8);
        counts.put(cf, new long[] {ByteBuffer.wrap(it.value()).getLong()});
      }
    }
  }

  long version() {
    return version;
  }

  /** Lineage of the committed version (formats.md 3.4), null when not known. */
  byte[] lineage() {
    return lineage;
  }

  boolean hasColumnFamily(String cf) {
    return counts.containsKey(cf) || (DEFAULT_CF.equals(cf));
  }

  java.util.Set<String> columnFamilies() {
    java.util.Set<String> s = new java.util.TreeSet<>(counts.keySet());
    s.add(DEFAULT_CF);
    return s;
  }

  long count(String cf) {
    long[] c = counts.get(cf);
    return c == null ? 0 : c[0];
  }

  long totalCount() {
    long t = 0;
    for (long[] c : counts.values()) t += c[0];
    return t;
  }

  private ColumnFamilyHandle handle(String cf) {
    ColumnFamilyHandle h = handles.get(cf);
    if (h == null) throw new IllegalArgumentException("column family '" + cf + "' does not exist in store " + storeId);
    return h;
  }

  private long[] counter(String cf) {
    return counts.computeIfAbsent(cf, k -> new long[1]);
  }

  /**
   * Waits until the last commit's writes are in the database. Throws when they could not be written: the
   * database then lacks a version its bookkeeping here claims, and the provider stops trusting the directory.
   */
  private void awaitWrites() throws RocksDBException {
    if (unstartedWrites != null) {
      java.util.concurrent.FutureTask<Void> unstarted = takeUnstartedWrites();
      if (unstarted != null) unstarted.run(); // nobody started them: written here, now
    }
    java.util.concurrent.Future<?> w = writing;
    if (w != null && !w.isDone()) {
      try {
        w.get();
      } catch (java.util.concurrent.ExecutionException e) {
        // writeFailure says why
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new RocksDBException("interrupted while version " + version + " of store " + storeId
            + " was written to " + dir);
      }
    }
    String failure = writeFailure;
    if (failure != null) throw new RocksDBException(failure);
  }

  private synchronized java.util.concurrent.FutureTask<Void> takeUnstartedWrites() {
    java.util.concurrent.FutureTask<Void> t = unstartedWrites;
    unstartedWrites = null;
    return t;
  }

  /**
   * Hands the last commit's writes to the {@link CommitWriter}, which runs them at the JVM's next quiet point. The
   * provider calls it once its commit is done; whoever needs the database first writes them (awaitWrites).
   */
  void startWrites() {
    if (unstartedWrites == null) return;
    CommitWriter.submit(() -> {
      java.util.concurrent.FutureTask<Void> t = takeUnstartedWrites();
      if (t != null) t.run();
    });
  }

  /** Whether the committed versions' writes all reached the database (waits for the last one). */
  boolean writesApplied() {
    try {
      awaitWrites();
      return true;
    } catch (RocksDBException e) {
      return false;
    }
  }

  private void awaitWritesUnchecked() {
    try {
      awaitWrites();
    } catch (RocksDBException e) {
      throw new IllegalStateException("statestore: " + e.getMessage(), e);
    }
  }

  /** The value of {@code key}: the batch's own write of it, else the database's. */
  byte[] get(String cf, byte[] key) throws RocksDBException {
    awaitWrites();
    byte op = changes.current(cf, key);
    if (op == Increment.PUT) return changes.value(cf, key);
    if (op == Increment.DELETE) return null;
    return db.get(handle(cf), key); // unwritten by the batch, or a merge (written through)
  }

  /** A task's read ({@link #get}), remembered for the count of a later write of the key (KeyPresence). Only the
   * task's thread calls it, never while a pending increment is applied in the background. */
  byte[] read(String cf, byte[] key) throws RocksDBException {
    awaitWrites();
    byte op = changes.current(cf, key);
    if (op == Increment.PUT) return changes.value(cf, key);
    if (op == Increment.DELETE) return null;
    byte[] v = db.get(handle(cf), key);
    if (op == 0) presence.note(cf, key, v != null);
    return v;
  }

  boolean exists(String cf, byte[] key) {
    awaitWritesUnchecked();
    byte op = changes.current(cf, key);
    if (op != 0) return op != Increment.DELETE;
    return RocksCompat.keyExists(db, handle(cf), key);
  }

  /** Whether {@code key} holds a value now: the commit's record of it, else {@code known} (a KeyPresence answer
   * the caller had), else what a read remembered, else RocksDB. */
  private boolean holdsValue(String cf, ColumnFamilyHandle h, byte[] key, byte recorded, int known) {
    if (recorded != 0) return recorded != Increment.DELETE;
    if (known == KeyPresence.UNKNOWN) known = presence.lookup(cf, key);
    return known == KeyPresence.UNKNOWN ? RocksCompat.keyExists(db, h, key) : known == KeyPresence.PRESENT;
  }

  /** {@code known}: whether the key held a value before, as the caller knows it (KeyPresence's answers). */
  void put(String cf, byte[] key, byte[] value, int known) throws RocksDBException {
    awaitWrites();
    ColumnFamilyHandle h = handle(cf);
    byte recorded = changes.put(cf, key, value);
    if (!holdsValue(cf, h, key, recorded, known)) counter(cf)[0]++;
  }

  void delete(String cf, byte[] key) throws RocksDBException {
    awaitWrites();
    ColumnFamilyHandle h = handle(cf);
    if (!holdsValue(cf, h, key, changes.current(cf, key), KeyPresence.UNKNOWN)) return;
    counter(cf)[0]--;
    changes.delete(cf, key);
  }

  /**
   * Byte concatenation by read-modify-write: the directory stays readable without a merge operator. Written
   * through at once, after what the batch has pending, so that the database holds the key's current value.
   */
  void merge(String cf, byte[] key, byte[] operand) throws RocksDBException {
    writePending();
    ColumnFamilyHandle h = handle(cf);
    byte[] current = db.get(h, key);
    db.put(h, writeOptions, key, ChangeSet.concat(current, operand));
    if (current == null) counter(cf)[0]++;
    changes.merge(cf, key, operand);
  }

  /** Writes the batch's pending puts and deletes into the database (before a scan or a merge). */
  private void writePending() throws RocksDBException {
    awaitWrites();
    SortedWriteBatch pending = changes.takeUnwritten(cf -> handle(cf).getID());
    if (pending == null) return;
    try (WriteBatch b = pending.toWriteBatch()) {
      db.write(writeOptions, b);
    }
  }

  void createColumnFamily(String cf) throws RocksDBException {
    awaitWrites();
    if (counts.containsKey(cf)) return;
    synchronized (cfLock) {
      if (!handles.containsKey(cf)) {
        handles.put(cf, db.createColumnFamily(new ColumnFamilyDescriptor(cf.getBytes(StandardCharsets.UTF_8), cfOptions)));
      }
    }
    counts.put(cf, new long[1]);
    changes.createCf(cf);
  }

  boolean dropColumnFamily(String cf) throws RocksDBException {
    awaitWrites();
    if (!counts.containsKey(cf) || DEFAULT_CF.equals(cf)) return false;
    synchronized (cfLock) {
      ColumnFamilyHandle h = handles.remove(cf);
      if (h != null) {
        db.dropColumnFamily(h);
        h.close();
      }
    }
    counts.remove(cf);
    changes.dropCf(cf);
    presence.clear();
    return true;
  }

  /** An iterator over {@code cf} as the batch has written it so far (what it has pending is written first). */
  RocksIterator iterator(String cf) {
    try {
      writePending();
    } catch (RocksDBException e) {
      throw new IllegalStateException("statestore: cannot write the batch's changes to " + dir + " before a scan of '"
          + cf + "': " + e.getMessage(), e);
    }
    return db.newIterator(handle(cf));
  }

  boolean hasUncommittedChanges() {
    return !changes.isEmpty();
  }

  long uncommittedBytes() {
    return changes.approxBytes();
  }

  long memoryBytes() {
    try {
      return db.getAggregatedLongProperty("rocksdb.size-all-mem-tables") + changes.approxBytes();
    } catch (RocksDBException e) {
      return changes.approxBytes();
    }
  }

  long sstBytes() {
    try {
      return db.getAggregatedLongProperty("rocksdb.total-sst-files-size");
    } catch (RocksDBException e) {
      return 0;
    }
  }

  /**
   * The increment of the batch in progress, as version {@code version + 1} over this store's lineage; nothing
   * is written yet: {@link #finishCommit} does, once the increment is encoded (which sets its lineage).
   */
  Increment prepareCommit() {
    awaitWritesUnchecked();
    Increment inc = changes.toIncrement(storeId, version + 1, this::count);
    inc.parentLineage = lineage;
    return inc;
  }

  /**
   * Moves the store to the version of {@code inc} (from {@link #prepareCommit}, encoded): the batch's pending
   * writes, counts, version and lineage go into the database in one write batch, on the commit writer's thread
   * once {@link #startWrites} is called, or by the next use of the database, which needs them
   * (docs/performance.md). The commit's change set goes with them.
   */
  void finishCommit(Increment inc) throws RocksDBException {
    awaitWrites();
    byte[] next = lineage == null ? null : inc.lineage;
    ChangeSet committed = changes;
    Map<String, Integer> cfIds = new HashMap<>();
    for (String cf : committed.touchedCfs()) cfIds.put(cf, handle(cf).getID());
    ColumnFamilyHandle meta = handles.get(META_CF);
    long committedVersion = inc.version;
    List<Increment.CfEntry> cfTable = new ArrayList<>(inc.cfTable);
    changes = new ChangeSet();
    version = inc.version;
    lineage = next;
    presence.clear();
    endBatch();
    java.util.concurrent.FutureTask<Void> writes = new java.util.concurrent.FutureTask<>(() -> {
      SortedWriteBatch pending = committed.takeUnwritten(cfIds::get);
      try (WriteBatch b = pending != null ? pending.toWriteBatch() : new WriteBatch()) {
        for (Increment.CfEntry e : cfTable) {
          byte[] key = ascii(COUNT_PREFIX + e.name);
          if (e.exists) b.put(meta, key, u64(e.keyCount));
          else b.delete(meta, key);
        }
        b.put(meta, VERSION_KEY, u64(committedVersion));
        putLineage(b, meta, next);
        db.write(writeOptions, b);
      } catch (RocksDBException | RuntimeException e) {
        writeFailure = "the writes of version " + committedVersion + " of store " + storeId + " did not reach "
            + dir + ": " + e.getMessage();
        org.slf4j.LoggerFactory.getLogger(LocalStore.class).warn("statestore: {}", writeFailure);
      }
    }, null);
    synchronized (this) {
      unstartedWrites = writes;
    }
    writing = writes;
  }

  private static void putLineage(WriteBatch b, ColumnFamilyHandle meta, byte[] l) throws RocksDBException {
    if (l != null) b.put(meta, LINEAGE_KEY, l);
    else b.delete(meta, LINEAGE_KEY);
  }

  /** A batch starts writing: pin the committed version so that {@link #rollback} can restore it. */
  void beginBatch() {
    awaitWritesUnchecked();
    endBatch();
    batchStart = db.getSnapshot();
    countsAtBatchStart = new HashMap<>();
    for (Map.Entry<String, long[]> e : counts.entrySet()) countsAtBatchStart.put(e.getKey(), e.getValue()[0]);
  }

  private void endBatch() {
    if (batchStart != null) {
      db.releaseSnapshot(batchStart);
      batchStart.close();
      batchStart = null;
    }
    countsAtBatchStart = null;
  }

  /**
   * Undoes the batch in progress: every key it changed gets back its value at the batch's start, in one write
   * batch; column families it created are dropped; counts are restored. Returns false, having changed nothing,
   * when that is impossible (the batch dropped a column family: its data is gone, or no batch was begun): the
   * caller then stops trusting this directory.
   */
  boolean rollback() throws RocksDBException {
    awaitWrites();
    if (!changes.droppedCfs().isEmpty() || (batchStart == null && !changes.isEmpty())) return false;
    if (batchStart != null) {
      try (ReadOptions atStart = new ReadOptions().setSnapshot(batchStart); WriteBatch b = new WriteBatch()) {
        for (String cf : changes.touchedCfs()) {
          if (changes.createdCfs().contains(cf)) continue; // dropped below, keys and all
          ColumnFamilyHandle h = handles.get(cf);
          for (byte[] key : changes.keys(cf)) {
            byte[] before = db.get(h, atStart, key);
            if (before == null) b.delete(h, key);
            else b.put(h, key, before);
          }
        }
        db.write(writeOptions, b);
      }
      synchronized (cfLock) {
        for (String cf : changes.createdCfs()) {
          ColumnFamilyHandle h = handles.remove(cf);
          if (h != null) {
            db.dropColumnFamily(h);
            h.close();
          }
        }
      }
      counts.clear();
      for (Map.Entry<String, Long> e : countsAtBatchStart.entrySet()) counts.put(e.getKey(), new long[] {e.getValue()});
    }
    changes.clear();
    presence.clear();
    endBatch();
    return true;
  }

  /** Applies increment {@code inc} (formats.md 3.3); {@code file} names it in errors. */
  void apply(Increment inc, String file) throws IOException, RocksDBException {
    awaitWrites();
    if (!storeId.equals(inc.storeId)) {
      throw new IOException("Increment " + file + " belongs to store '" + inc.storeId + "', not '" + storeId + "'");
    }
    if (version >= inc.version) return;
    if (version != inc.baseVersion) {
      throw new IOException("Version gap applying " + file + " to store " + storeId + ": expected version "
          + inc.baseVersion + ", found " + version);
    }
    if (lineage != null && inc.parentLineage != null && !java.util.Arrays.equals(lineage, inc.parentLineage)) {
      throw new LineageMismatchException("Lineage mismatch applying " + file + " to store " + storeId + " at version "
          + version + ": the increment continues lineage " + IncrementCodec.hex(inc.parentLineage)
          + ", the store holds " + IncrementCodec.hex(lineage));
    }
    boolean known = lineage != null && inc.parentLineage != null;
    byte[] next = known ? inc.lineage : null;
    synchronized (cfLock) {
      for (int i = 0; i < inc.size; i++) {
        if (inc.ops[i] == Increment.DROP_COLUMN_FAMILY) {
          String cf = inc.cfTable.get(inc.cfIndex[i]).name;
          ColumnFamilyHandle h = handles.remove(cf);
          if (h != null && !DEFAULT_CF.equals(cf)) {
            db.dropColumnFamily(h);
            h.close();
          }
          counts.remove(cf);
        }
      }
      for (Increment.CfEntry e : inc.cfTable) {
        if (e.exists && !handles.containsKey(e.name)) {
          handles.put(e.name, db.createColumnFamily(
              new ColumnFamilyDescriptor(e.name.getBytes(StandardCharsets.UTF_8), cfOptions)));
        }
      }
    }
    ColumnFamilyHandle meta = handles.get(META_CF);
    boolean merges = false;
    for (int i = 0; i < inc.size && !merges; i++) merges = inc.ops[i] == Increment.MERGE;
    // Without merges (which read what they append to), the records go to RocksDB serialized, in key order, in
    // one call; with them, one by one.
    try (WriteBatch b = merges ? new WriteBatch()
        : SortedWriteBatch.of(inc, cf -> handles.get(inc.cfTable.get(cf).name).getID()).toWriteBatch()) {
      for (int i : merges ? inKeyOrder(inc) : new int[0]) {
        ColumnFamilyHandle h = handles.get(inc.cfTable.get(inc.cfIndex[i]).name);
        switch (inc.ops[i]) {
          case Increment.PUT -> b.put(h, inc.keys[i], inc.values[i]);
          case Increment.DELETE -> b.delete(h, inc.keys[i]);
          case Increment.MERGE -> b.put(h, inc.keys[i], ChangeSet.concat(db.get(h, inc.keys[i]), inc.values[i]));
          default -> { }
        }
      }
      for (Increment.CfEntry e : inc.cfTable) {
        byte[] key = ascii(COUNT_PREFIX + e.name);
        if (e.exists) {
          b.put(meta, key, u64(e.keyCount));
          counts.put(e.name, new long[] {e.keyCount});
        } else {
          b.delete(meta, key);
          counts.remove(e.name);
        }
      }
      b.put(meta, VERSION_KEY, u64(inc.version));
      putLineage(b, meta, next);
      db.write(writeOptions, b);
    }
    version = inc.version;
    lineage = next;
    presence.clear();
  }

  /**
   * The record numbers of {@code inc} by column family, then key in RocksDB's bytewise order (stable: equal keys
   * keep their order). RocksDB takes a batch of sorted keys into its memtable several times faster than the
   * random order a batch wrote them in.
   */
  static int[] inKeyOrder(Increment inc) {
    Integer[] order = new Integer[inc.size];
    for (int i = 0; i < order.length; i++) order[i] = i;
    java.util.Arrays.sort(order, (x, y) -> {
      int byCf = Short.compare(inc.cfIndex[x], inc.cfIndex[y]);
      return byCf != 0 ? byCf : java.util.Arrays.compareUnsigned(inc.keys[x], inc.keys[y]);
    });
    int[] out = new int[order.length];
    for (int i = 0; i < out.length; i++) out[i] = order[i];
    return out;
  }

  /** An increment that continues another history than the one the store holds (formats.md 3.4). */
  static final class LineageMismatchException extends IOException {
    LineageMismatchException(String message) {
      super(message);
    }
  }

  /**
   * Writes the memtables to SST files. Safe from a background thread while a task writes (RocksDB is
   * thread-safe and column family changes wait on {@code cfLock}), as long as the store stays open.
   */
  void flush() throws RocksDBException {
    awaitWrites();
    synchronized (cfLock) {
      try (FlushOptions f = new FlushOptions().setWaitForFlush(true)) {
        db.flush(f, new ArrayList<>(handles.values()));
      }
    }
  }

  /**
   * A RocksDB checkpoint of the database as it is now into {@code target} (hard links; RocksDB flushes what
   * the memtables still hold first). The caller makes sure no write is under way.
   */
  /**
   * {@link #flush}, and for a store of under {@value #COMPACT_FOR_SNAPSHOT_BYTES} bytes of SST files, a compaction of
   * each column family into one file: a snapshot copies every SST file, and a small store's snapshots were mostly
   * the index, filter and properties blocks of the up to {@value #LEVEL0_COMPACTION_TRIGGER} level-0 files its
   * flushes left (at Spark's 200 partitions, snapshots were 80% of the checkpoint's bytes). Compacting a few
   * hundred kilobytes costs a few milliseconds of the snapshot thread; a large store keeps its files.
   */
  void flushForSnapshot() throws RocksDBException {
    flush();
    if (sstBytes() >= COMPACT_FOR_SNAPSHOT_BYTES) return;
    synchronized (cfLock) {
      for (ColumnFamilyHandle h : handles.values()) db.compactRange(h);
    }
  }

  void checkpointTo(File target) throws RocksDBException {
    awaitWrites();
    try (Checkpoint c = Checkpoint.create(db)) {
      c.createCheckpoint(target.getPath());
    }
  }

  @Override
  public void close() {
    writesApplied(); // the writer thread must be done with the database
    endBatch();
    closeDatabase();
  }

  /** Closes the column families, the database and the options this store made. */
  private void closeDatabase() {
    for (ColumnFamilyHandle h : handles.values()) h.close();
    handles.clear();
    db.close();
    OPEN.decrementAndGet();
    writeOptions.close();
    cfOptions.close();
    dbOptions.close();
  }

  /**
   * This store's share of the RocksDB memory its JVM's stores hold together (the shared cache's usage, memtables
   * included in bounded mode, over the stores open): Spark sums a metric over the partitions, so the sum is the
   * executors' total.
   */
  static long memoryShare() {
    Cache cache = sharedCache;
    return cache == null ? 0 : cache.getUsage() / Math.max(1, OPEN.get());
  }

  static byte[] u64(long v) {
    return ByteBuffer.allocate(8).putLong(v).array();
  }

  static byte[] ascii(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  static boolean startsWith(byte[] a, byte[] prefix) {
    if (a.length < prefix.length) return false;
    return java.util.Arrays.equals(a, 0, prefix.length, prefix, 0, prefix.length);
  }

  static ReadOptions readOptions() {
    return new ReadOptions();
  }
}
