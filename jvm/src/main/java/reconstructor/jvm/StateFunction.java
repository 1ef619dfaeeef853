package reconstructor.jvm;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Objects;
import java.util.Set;

import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.GroupState;
import org.apache.spark.sql.types.StructType;

/**
 * The state function over {@code (topic, session)} groups, as the Python engine's
 * {@code spark.stateful.SessionReconstructor}: the batch step, the session's state and its
 * timeout, and the output records (one per applied change, the rows a resumed session gets back,
 * one session record, and the violation records).
 *
 * <p>A session silent for the timeout times out but forgets nothing: an open one keeps its table
 * (status {@code timed_out}), an ended one keeps its scalars. The state is removed once the
 * session has been silent for the retention, so the state store stays bounded.
 */
final class StateFunction implements FlatMapGroupsWithStateFunction<Row, Row, Row, Row> {
  private final EngineSettings cfg;
  private final Layout in;
  private final NestedRows nested;
  private final SessionState.Fields fields;
  private final Records out;
  private final Chain chain;

  StateFunction(EngineSettings cfg, Layout in, StructType stateSchema, StructType recordsSchema) {
    this.cfg = cfg;
    this.in = in;
    this.nested = new NestedRows(cfg);
    this.fields = new SessionState.Fields(stateSchema);
    this.out = new Records(recordsSchema, cfg.names.length, in);
    this.chain = new Chain(cfg.chainKey, cfg.names, cfg.types);
  }

  @Override
  public Iterator<Row> call(Row key, Iterator<Row> rows, GroupState<Row> state) {
    String topic = key.getString(0), session = key.isNullAt(1) ? null : key.getString(1);
    if (state.hasTimedOut()) {
      return onTimeout(topic, session, state).iterator();
    }
    Row stored = state.exists() ? state.get() : null;
    byte[] blob = stored == null || stored.isNullAt(fields.table) ? null : (byte[]) stored.get(fields.table);
    SessionState previous = null;
    if (stored != null) {
      previous = SessionState.scalars(stored, fields);
      previous.table = blob == null ? null : SessionTable.load(blob, cfg.names, cfg.types, cfg.schemaName);
    }
    String known = SessionTable.head(blob);
    List<Message> msgs = Message.gather(rows, in, nested);
    EngineSettings.Seed held = cfg.heldSeed(topic, session);
    EngineSettings.Seed seed = stored == null ? cfg.seed(topic, session, state.getCurrentProcessingTimeMs()) : null;
    if (held != null) {  // a replay's session the tables hold: their records are not applied again
      msgs = recordsAfter(msgs, held.state);
    }
    if (seed != null) {  // and with no state yet, it starts where they have it
      previous = seed.state.copy();
      previous.table = seed.state.table.copy();
      known = seed.chainHead;
    }
    Violation lost = cfg.quarantine ? cfg.lossReaching(topic, session, previous) : null;
    if (lost != null) {  // set aside before its records: they come after the records lost
      previous = previous.copy();
      previous.status = SessionState.QUARANTINED;
    }
    BatchStep result = BatchStep.run(topic, session, msgs, previous, cfg);
    List<Row> emitted = new ArrayList<>();
    if (result.violation != null) {
      emitted.add(out.violation(Records.VIOLATION, topic, session, result.violation));
      return emitted.iterator();
    }
    if (lost != null) {
      emitted.add(out.violation(Records.RECORDED, topic, session, lost));
    }
    for (Violation v : result.recorded) {
      emitted.add(out.violation(Records.RECORDED, topic, session, v));
    }
    SessionState now = result.state;
    if (now == null) {
      return emitted.iterator();  // nothing applied (all skipped while awaiting a snapshot, or no session named)
    }
    if (!result.changed && lost == null) {  // records set aside only: the session is as it was
      if (seed != null) {
        keepSeed(state, seed, previous);
      } else if (held != null && asSeeded(previous, held.state)) {  // the kept seed: the same call again
        armSeedTimeout(state, held, previous.status);
      } else {
        armTimeout(state, previous.status, blob != null);
      }
      return emitted.iterator();
    }
    List<Change> changes = result.changes;
    String[] prevs = new String[changes.size()], digests = new String[changes.size()];
    String[] link = known == null && !cfg.chainSeeds.isEmpty() && now.firstSeq != null
        ? cfg.chainSeeds.get(topic + "\u0000" + session + "\u0000" + now.firstSeq) : null;
    String head;
    if (link == null) {
      head = chain.digest(topic, session, changes, known == null ? Chain.START : known, prevs, digests);
    } else {
      // A replay started the session at a snapshot the tables hold: its rows take the tables' digests.
      int k = 0;
      while (k < changes.size() && now.firstSeq.equals(changes.get(k).message.seq)) {
        prevs[k] = link[0];
        digests[k] = link[1];
        k++;
      }
      List<Change> rest = changes.subList(k, changes.size());
      String[] restPrevs = new String[rest.size()], restDigests = new String[rest.size()];
      head = chain.digest(topic, session, rest, link[1], restPrevs, restDigests);
      System.arraycopy(restPrevs, 0, prevs, k, rest.size());
      System.arraycopy(restDigests, 0, digests, k, rest.size());
    }
    head = Chain.START.equals(head) ? null : head;
    state.update(now.toRow(fields, SessionTable.dump(now.table, cfg.names, cfg.types, head)));
    armTimeout(state, now.status, true);
    List<Change> back = previous != null && previous.is(SessionState.TIMED_OUT) && now.is(SessionState.OPEN)
        ? rowsBack(changes, now, previous) : Collections.emptyList();
    emitted.addAll(out.changes(topic, session, changes, prevs, digests, back));
    emitted.add(sessionRecord(topic, session, now, now.status, now.table.size(), head));
    return emitted.iterator();
  }

  /** A seeded session's records without those the tables hold already: on its partition, at or
   * before its last applied offset. */
  private static List<Message> recordsAfter(List<Message> msgs, SessionState seed) {
    if (seed.lastOffset == null) {
      return msgs;
    }
    List<Message> after = new ArrayList<>(msgs.size());
    for (Message m : msgs) {
      if (m.partition != seed.partition || m.offset > seed.lastOffset) {
        after.add(m);
      }
    }
    return after;
  }

  /** A seeded session none of whose records applied (the tables hold them, or they were set
   * aside) keeps its seed as its state. */
  private void keepSeed(GroupState<Row> state, EngineSettings.Seed seed, SessionState seeded) {
    boolean ended = seeded.is(SessionState.ENDED);
    state.update(seeded.toRow(fields, ended ? null : SessionTable.dump(seeded.table, cfg.names, cfg.types, seed.chainHead)));
    armSeedTimeout(state, seed, seeded.status);
  }

  /** The timeout of a session kept as its seed: a timed-out or ended one until the seed expires,
   * as the live writer would have removed it; an open or quarantined one as any call arms it. */
  private void armSeedTimeout(GroupState<Row> state, EngineSettings.Seed seed, String status) {
    if (SessionState.ENDED.equals(status) || SessionState.TIMED_OUT.equals(status)) {
      state.setTimeoutDuration(Math.max(1, seed.expiresMs - state.getCurrentProcessingTimeMs()));
    } else {
      armTimeout(state, status, true);
    }
  }

  /** Whether a session's state is still its seed's: nothing applied since, status unchanged. */
  private static boolean asSeeded(SessionState st, SessionState seed) {
    return st.status.equals(seed.status) && st.partition == seed.partition
        && Objects.equals(st.lastOffset, seed.lastOffset);
  }

  /** A session record, with its row's seal (the Python engine's {@code core.seal}). */
  private Row sessionRecord(String topic, String session, SessionState st, String status, long rowCount, String head) {
    String seal = chain.seal(topic, session, st.partition, status, st.firstSeq, st.lastSeq, st.lastOffset, rowCount, head);
    return out.session(topic, session, st, status, rowCount, head, seal);
  }

  /** The session table's rows the batch did not change, as upserts carrying the session's last
   * record before its timeout: a timed-out session that resumes gets every row back in
   * {@code current_rows}. */
  private static List<Change> rowsBack(List<Change> changes, SessionState now, SessionState resumedFrom) {
    Set<String> touched = new HashSet<>();
    for (Change c : changes) {
      touched.add(c.rowId);
    }
    Message last = Message.of(resumedFrom.partition, resumedFrom.lastOffset, resumedFrom.lastSeq, "update",
                              resumedFrom.lastEventUs, null);
    List<Change> back = new ArrayList<>();
    for (java.util.Map.Entry<String, Object[]> row : now.table.rows.entrySet()) {
      if (!touched.contains(row.getKey())) {
        back.add(new Change(last, -1, row.getKey(), "upsert", row.getValue()));
      }
    }
    return back;
  }

  /** Spark clears a group's timeout whenever the function runs for it, so every call sets it. A
   * quarantined session waits for its resync snapshot for the whole retention; an ended one whose
   * table is gone has only the rest of the retention left. */
  private void armTimeout(GroupState<Row> state, String status, boolean hasTable) {
    if (SessionState.QUARANTINED.equals(status)) {
      state.setTimeoutDuration(cfg.retentionMs);
    } else if (SessionState.ENDED.equals(status) && !hasTable) {
      state.setTimeoutDuration(Math.max(1, cfg.retentionMs - cfg.timeoutMs));
    } else {
      state.setTimeoutDuration(cfg.timeoutMs);
    }
  }

  private List<Row> onTimeout(String topic, String session, GroupState<Row> state) {
    Row row = state.get();
    SessionState previous = SessionState.scalars(row, fields);
    byte[] blob = row.isNullAt(fields.table) ? null : (byte[]) row.get(fields.table);
    long rowCount = row.getLong(fields.rowCount);
    List<Row> emitted = new ArrayList<>();
    Violation lost = cfg.quarantine ? cfg.lossReaching(topic, session, previous) : null;
    if (lost != null) {  // silent since records on its partition were lost: set aside
      state.update(SessionState.with(row, fields, fields.status, SessionState.QUARANTINED));
      state.setTimeoutDuration(cfg.retentionMs);
      emitted.add(out.violation(Records.RECORDED, topic, session, lost));
      emitted.add(sessionRecord(topic, session, previous, SessionState.QUARANTINED, rowCount, SessionTable.head(blob)));
      return emitted;
    }
    if (previous.is(SessionState.OPEN)) {
      state.update(SessionState.with(row, fields, fields.status, SessionState.TIMED_OUT));
    } else if (previous.is(SessionState.ENDED) && blob != null) {
      state.update(SessionState.with(row, fields, fields.table, null));
    } else {
      state.remove();
      return emitted;
    }
    state.setTimeoutDuration(Math.max(1, cfg.retentionMs - cfg.timeoutMs));
    if (previous.is(SessionState.OPEN)) {
      emitted.add(sessionRecord(topic, session, previous, SessionState.TIMED_OUT, rowCount, SessionTable.head(blob)));
    }
    return emitted;
  }

  /** The output rows ({@code records_ddl}): built by column position, read once per query. */
  static final class Records implements java.io.Serializable {
    static final String CHANGE = "change", CURRENT = "current", SESSION = "session", VIOLATION = "violation",
        RECORDED = "recorded";

    private final int width, record, topic, session, partition, offset, seq, type, rowPos, rowId, op, isLatest,
        firstValue, eventTs, kafkaTs, chainPrev, chainDigest, info, columns;
    private final Layout in;

    Records(StructType s, int columns, Layout in) {
      width = s.size();
      record = s.fieldIndex("record");
      topic = s.fieldIndex("topic");
      session = s.fieldIndex("session");
      partition = s.fieldIndex("partition");
      offset = s.fieldIndex("offset");
      seq = s.fieldIndex("seq");
      type = s.fieldIndex("type");
      rowPos = s.fieldIndex("row_pos");
      rowId = s.fieldIndex("row_id");
      op = s.fieldIndex("op");
      isLatest = s.fieldIndex("is_latest");
      firstValue = isLatest + 1;
      eventTs = s.fieldIndex("event_ts");
      kafkaTs = s.fieldIndex("kafka_ts");
      chainPrev = s.fieldIndex("chain_prev");
      chainDigest = s.fieldIndex("chain_digest");
      info = s.fieldIndex("info");
      this.columns = columns;
      this.in = in;
    }

    Row violation(String kind, String t, String s, Violation v) {
      Object[] r = new Object[width];
      r[record] = kind;
      r[topic] = t;
      r[session] = s;
      r[partition] = v.partition;
      r[offset] = v.offset;
      r[seq] = v.foundSeq;
      r[info] = v.toJson();
      return RowFactory.create(r);
    }

    List<Row> changes(String t, String s, List<Change> changes, String[] prevs, String[] digests, List<Change> back) {
      int n = changes.size(), all = n + back.size();
      Set<String> later = new HashSet<>();
      boolean[] latest = new boolean[all];
      for (int i = all - 1; i >= 0; i--) {
        latest[i] = later.add(i < n ? changes.get(i).rowId : back.get(i - n).rowId);
      }
      List<Row> rows = new ArrayList<>(all + 1);
      for (int i = 0; i < all; i++) {
        Change c = i < n ? changes.get(i) : back.get(i - n);
        Message m = c.message;
        Object[] r = new Object[width];
        r[record] = i < n ? CHANGE : CURRENT;
        r[topic] = t;
        r[session] = s;
        r[partition] = m.partition;
        r[offset] = m.offset;
        r[seq] = m.seq;
        r[type] = m.type;
        r[rowPos] = c.rowPos;
        r[rowId] = c.rowId;
        r[op] = c.op;
        r[isLatest] = latest[i];
        for (int j = 0; j < columns; j++) {
          Object v = c.values[j];
          r[firstValue + j] = "timestamp".equals(in.columnTypes[j]) ? in.time((Long) v) : v;
        }
        r[eventTs] = in.time(m.eventUs);
        r[kafkaTs] = in.time(m.kafkaUs);
        r[chainPrev] = i < n ? prevs[i] : null;
        r[chainDigest] = i < n ? digests[i] : null;
        rows.add(RowFactory.create(r));
      }
      return rows;
    }

    /** The session record: its coordinates, and its fields as the JSON {@code SESSION_INFO_DDL} reads. */
    Row session(String t, String s, SessionState st, String status, long rowCount, String head, String seal) {
      Object[] r = new Object[width];
      r[record] = SESSION;
      r[topic] = t;
      r[session] = s;
      r[partition] = st.partition;
      r[offset] = st.lastOffset;
      r[seq] = st.lastSeq;
      StringBuilder j = new StringBuilder(256).append("{\"status\": ");
      Text.jsonString(j, status);
      j.append(", \"first_seq\": ").append(st.firstSeq)
          .append(", \"last_seq\": ").append(st.lastSeq)
          .append(", \"last_offset\": ").append(st.lastOffset)
          .append(", \"snapshot_seq\": ").append(st.snapshotSeq)
          .append(", \"snapshot_offset\": ").append(st.snapshotOffset)
          .append(", \"row_count\": ").append(rowCount)
          .append(", \"started_us\": ").append(st.startedUs)
          .append(", \"last_event_us\": ").append(st.lastEventUs)
          .append(", \"chain_head\": ");
      if (head == null) {
        j.append("null");
      } else {
        Text.jsonString(j, head);
      }
      j.append(", \"chain_seal\": ");
      if (seal == null) {
        j.append("null");
      } else {
        Text.jsonString(j, seal);
      }
      r[info] = j.append('}').toString();
      return RowFactory.create(r);
    }
  }
}
