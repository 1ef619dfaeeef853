package reconstructor.jvm;

import java.io.Serializable;
import java.sql.Timestamp;
import java.time.Instant;
import java.util.List;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.util.DateTimeUtils;
import org.apache.spark.sql.types.StructType;

/**
 * Where the stateful step's input columns sit (the parse stage's: topic, group_session, the
 * core's INPUT columns, the row columns, and in quarantine mode the raw value), read once per
 * query, and how a time crosses between Spark's external rows and epoch microseconds.
 */
final class Layout implements Serializable {
  final int topic, groupSession, partition, offset, kafkaTs, key, session, seq, type, eventTs, rowPos, rowId, op,
      error, value, nestedRows;
  final int[] columns;
  final String[] columnTypes;
  /** Whether Spark hands times over as {@code java.time.Instant} ({@code spark.sql.datetime.java8API.enabled}). */
  final boolean instants;

  Layout(StructType in, String[] names, String[] types, boolean instants) {
    topic = in.fieldIndex("topic");
    groupSession = in.fieldIndex("group_session");
    partition = in.fieldIndex("partition");
    offset = in.fieldIndex("offset");
    kafkaTs = in.fieldIndex("kafka_ts");
    key = in.fieldIndex("key");
    session = in.fieldIndex("session");
    seq = in.fieldIndex("seq");
    type = in.fieldIndex("type");
    eventTs = in.fieldIndex("event_ts");
    rowPos = in.fieldIndex("row_pos");
    rowId = in.fieldIndex("row_id");
    op = in.fieldIndex("op");
    error = in.fieldIndex("error");
    value = in.getFieldIndex("value").isDefined() ? in.fieldIndex("value") : -1;
    nestedRows = in.getFieldIndex("nested_rows").isDefined() ? in.fieldIndex("nested_rows") : -1;
    columns = new int[names.length];
    for (int i = 0; i < names.length; i++) {
      columns[i] = in.fieldIndex(names[i]);
    }
    columnTypes = types;
    this.instants = instants;
  }

  Message message(Row r) {
    return Message.of(r.getInt(partition), r.getLong(offset), r.isNullAt(seq) ? null : r.getLong(seq),
                      r.getString(type), micros(r.get(eventTs)), micros(r.get(kafkaTs)));
  }

  /** Why a row's record is malformed, as the Python engine's {@code kafka_order} words it; null
   * when it is not: it did not parse, or its Kafka key is missing or not its session. */
  String badReason(Row r) {
    String own = recordError(r);
    return own != null ? own : keyReason(r);
  }

  /** The parse stage's reason for the row's record, null when it gave none. */
  String recordError(Row r) {
    return r.isNullAt(error) ? null : r.getString(error);
  }

  /** The record's raw Kafka value (quarantine mode only, on its first row), else null. */
  String rawValue(Row r) {
    return value >= 0 && !r.isNullAt(value) ? r.getString(value) : null;
  }

  /** A vouched message's rows left whole by the parse stage, null when the row is one of them. */
  List<Row> nestedRows(Row r) {
    return nestedRows < 0 || r.isNullAt(nestedRows) ? null : r.getList(nestedRows);
  }

  /** Why the record's Kafka key makes it malformed, null when it does not. */
  String keyReason(Row r) {
    if (r.isNullAt(key)) {
      return "the Kafka record has no key; the key must be its session";
    }
    String k = r.getString(key), s = r.isNullAt(session) ? null : r.getString(session);
    if (!k.equals(s)) {
      return "Kafka key " + Text.pyRepr(k) + " is not the session " + (s == null ? "None" : Text.pyRepr(s));
    }
    return null;
  }

  /** A row's values in the row schema's order: times as epoch microseconds. */
  Object[] values(Row r) {
    Object[] v = new Object[columns.length];
    for (int i = 0; i < columns.length; i++) {
      Object x = r.get(columns[i]);
      v[i] = "timestamp".equals(columnTypes[i]) ? micros(x) : x;
    }
    return v;
  }

  static Long micros(Object t) {
    if (t == null) {
      return null;
    }
    if (t instanceof Instant) {
      return DateTimeUtils.instantToMicros((Instant) t);
    }
    return DateTimeUtils.fromJavaTimestamp((Timestamp) t);
  }

  Object time(Long us) {
    if (us == null) {
      return null;
    }
    return instants ? DateTimeUtils.microsToInstant(us) : DateTimeUtils.toJavaTimestamp(us);
  }
}
