package reconstructor.jvm;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * What a session carries from one micro-batch to the next, as the Python engine's
 * {@code SessionState}: its status, seqs, offsets, times (epoch microseconds) and table. Spark's
 * state store holds it as a row of the contract's state fields ({@code STATE_DDL}), the table as
 * its blob, so the {@code state} command reads either engine's checkpoint by the same names.
 */
final class SessionState implements java.io.Serializable {
  static final String OPEN = "open", ENDED = "ended", TIMED_OUT = "timed_out", QUARANTINED = "quarantined";

  int partition;
  String status;
  Long firstSeq, lastSeq, lastOffset, snapshotSeq, snapshotOffset, startedUs, lastEventUs;
  /** Null only for an ended session past its timeout, whose table is dropped. */
  SessionTable table;

  SessionState copy() {
    SessionState s = new SessionState();
    s.partition = partition;
    s.status = status;
    s.firstSeq = firstSeq;
    s.lastSeq = lastSeq;
    s.lastOffset = lastOffset;
    s.snapshotSeq = snapshotSeq;
    s.snapshotOffset = snapshotOffset;
    s.startedUs = startedUs;
    s.lastEventUs = lastEventUs;
    s.table = table;
    return s;
  }

  boolean is(String s) {
    return s.equals(status);
  }

  /** A session quarantined before any of its messages applied: no seqs, an empty table. */
  static SessionState quarantinedNew(int partition) {
    SessionState s = new SessionState();
    s.partition = partition;
    s.status = QUARANTINED;
    s.table = new SessionTable();
    return s;
  }

  // The state row's fields, by name (STATE_DDL's order is the contract's, not this class's).
  static final class Fields implements java.io.Serializable {
    final int partition, status, firstSeq, lastSeq, lastOffset, snapshotSeq, snapshotOffset, startedUs, lastEventUs,
        rowCount, table, width;

    Fields(org.apache.spark.sql.types.StructType s) {
      partition = s.fieldIndex("partition");
      status = s.fieldIndex("status");
      firstSeq = s.fieldIndex("first_seq");
      lastSeq = s.fieldIndex("last_seq");
      lastOffset = s.fieldIndex("last_offset");
      snapshotSeq = s.fieldIndex("snapshot_seq");
      snapshotOffset = s.fieldIndex("snapshot_offset");
      startedUs = s.fieldIndex("started_us");
      lastEventUs = s.fieldIndex("last_event_us");
      rowCount = s.fieldIndex("row_count");
      table = s.fieldIndex("table");
      width = s.size();
    }
  }

  /** The scalars of a state row; the table is read separately ({@link #withTable}). */
  static SessionState scalars(Row r, Fields f) {
    SessionState s = new SessionState();
    s.partition = r.getInt(f.partition);
    s.status = r.getString(f.status);
    s.firstSeq = longOrNull(r, f.firstSeq);
    s.lastSeq = longOrNull(r, f.lastSeq);
    s.lastOffset = longOrNull(r, f.lastOffset);
    s.snapshotSeq = longOrNull(r, f.snapshotSeq);
    s.snapshotOffset = longOrNull(r, f.snapshotOffset);
    s.startedUs = longOrNull(r, f.startedUs);
    s.lastEventUs = longOrNull(r, f.lastEventUs);
    return s;
  }

  Row toRow(Fields f, byte[] blob) {
    Object[] v = new Object[f.width];
    v[f.partition] = partition;
    v[f.status] = status;
    v[f.firstSeq] = firstSeq;
    v[f.lastSeq] = lastSeq;
    v[f.lastOffset] = lastOffset;
    v[f.snapshotSeq] = snapshotSeq;
    v[f.snapshotOffset] = snapshotOffset;
    v[f.startedUs] = startedUs;
    v[f.lastEventUs] = lastEventUs;
    v[f.rowCount] = (long) (table == null ? 0 : table.size());
    v[f.table] = blob;
    return RowFactory.create(v);
  }

  /** A state row with some fields replaced. */
  static Row with(Row r, Fields f, int field, Object value) {
    Object[] v = new Object[f.width];
    for (int i = 0; i < f.width; i++) {
      v[i] = i == field ? value : r.get(i);
    }
    return RowFactory.create(v);
  }

  private static Long longOrNull(Row r, int i) {
    return r.isNullAt(i) ? null : r.getLong(i);
  }
}
