package reconstructor.bench;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.ObjectOutputStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;

import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.GroupState;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * A prototype of the stateful step on the JVM, for the floor benchmark only (not the product).
 *
 * Over the reconstructor's own input columns it does the per-session work of the Python short
 * path for snapshots and updates: sort a group's rows in Kafka order, check the key, the parse
 * error and seq continuity against the state, apply snapshots and upserts/deletes to the session
 * table kept in the state (serialised per batch), and emit one change row per applied row change
 * and one session row with its fields as JSON. A violation is emitted as a row and the state is
 * left alone. What it leaves out (quarantine, ends, timeouts, drift) the Python core does for
 * batches like the benchmark's no differently.
 */
public final class StateStepPrototype {
  private StateStepPrototype() {}

  static final class SessionTable implements java.io.Serializable {
    long lastSeq;
    long lastOffset;
    LinkedHashMap<String, Object[]> rows = new LinkedHashMap<>();
  }

  public static Dataset<Row> apply(Dataset<Row> inputs) {
    StructType in = inputs.schema();
    int values = in.fieldIndex("error") + 1;
    List<StructField> out = new ArrayList<>(Arrays.asList(
        DataTypes.createStructField("record", DataTypes.StringType, false),
        DataTypes.createStructField("topic", DataTypes.StringType, true),
        DataTypes.createStructField("session", DataTypes.StringType, true),
        DataTypes.createStructField("partition", DataTypes.IntegerType, true),
        DataTypes.createStructField("offset", DataTypes.LongType, true),
        DataTypes.createStructField("seq", DataTypes.LongType, true),
        DataTypes.createStructField("type", DataTypes.StringType, true),
        DataTypes.createStructField("row_pos", DataTypes.IntegerType, true),
        DataTypes.createStructField("row_id", DataTypes.StringType, true),
        DataTypes.createStructField("op", DataTypes.StringType, true),
        DataTypes.createStructField("event_ts", DataTypes.TimestampType, true),
        DataTypes.createStructField("kafka_ts", DataTypes.TimestampType, true)));
    for (int i = values; i < in.size(); i++) {
      out.add(DataTypes.createStructField(in.fields()[i].name(), in.fields()[i].dataType(), true));
    }
    out.add(DataTypes.createStructField("info", DataTypes.StringType, true));
    StructType outSchema = DataTypes.createStructType(out);
    int width = in.size() - values;
    MapFunction<Row, String> key = r -> r.getString(0) + "\u0000" + r.getString(1);
    FlatMapGroupsWithStateFunction<String, Row, byte[], Row> fn = (k, rows, state) ->
        step(k, rows, state, in, values, width);
    return inputs.groupByKey(key, Encoders.STRING())
        .flatMapGroupsWithState(fn, OutputMode.Append(), Encoders.BINARY(), Encoders.row(outSchema),
            GroupStateTimeout.NoTimeout());
  }

  static Iterator<Row> step(String k, Iterator<Row> it, GroupState<byte[]> state, StructType in, int values,
                            int width) throws IOException, ClassNotFoundException {
    int partition = in.fieldIndex("partition"), offset = in.fieldIndex("offset"),
        kafkaTs = in.fieldIndex("kafka_ts"), keyCol = in.fieldIndex("key"), session = in.fieldIndex("session"),
        seq = in.fieldIndex("seq"), type = in.fieldIndex("type"), eventTs = in.fieldIndex("event_ts"),
        rowPos = in.fieldIndex("row_pos"), rowId = in.fieldIndex("row_id"), op = in.fieldIndex("op"),
        error = in.fieldIndex("error");
    List<Row> rows = new ArrayList<>();
    it.forEachRemaining(rows::add);
    rows.sort(Comparator.<Row>comparingLong(r -> r.getLong(offset))
        .thenComparingInt(r -> r.isNullAt(rowPos) ? -1 : r.getInt(rowPos)));
    SessionTable table = state.exists() ? read(state.get()) : null;
    String topic = rows.get(0).getString(0), name = rows.get(0).getString(1);
    List<Row> out = new ArrayList<>();
    long previous = Long.MIN_VALUE;
    for (Row r : rows) {
      long at = r.getLong(offset);
      boolean first = at != previous;
      previous = at;
      String t = r.getString(type);
      if (!r.isNullAt(error) || r.isNullAt(keyCol) || !r.getString(keyCol).equals(r.getString(session))) {
        return violation(topic, name, r, "MALFORMED", width);
      }
      if (first) {
        long s = r.getLong(seq);
        if (table == null) {
          if (!"snapshot".equals(t)) {
            return violation(topic, name, r, "NO_SNAPSHOT", width);
          }
          table = new SessionTable();
        } else if (s != table.lastSeq + 1) {
          return violation(topic, name, r, s <= table.lastSeq ? "DUPLICATE" : "GAP", width);
        } else if ("snapshot".equals(t)) {
          table.rows.clear();  // a resync would emit deletes for the rows it drops; not in this batch shape
        }
        table.lastSeq = s;
        table.lastOffset = at;
      }
      if (r.isNullAt(rowPos)) {
        continue;
      }
      String id = r.getString(rowId);
      Object[] v = new Object[width];
      for (int i = 0; i < width; i++) {
        v[i] = r.get(values + i);
      }
      boolean delete = "delete".equals(r.getString(op));
      if (delete) {
        if (table.rows.remove(id) == null) {
          return violation(topic, name, r, "UNKNOWN_ROW", width);
        }
      } else {
        Object[] old = table.rows.get(id);
        if (old != null && !"snapshot".equals(t)) {
          for (int i = 0; i < width; i++) {
            if (v[i] == null) {
              v[i] = old[i];  // an update carries the columns it changes
            }
          }
        }
        table.rows.put(id, v);
      }
      Object[] change = new Object[12 + width + 1];
      change[0] = "change"; change[1] = topic; change[2] = name; change[3] = r.get(partition);
      change[4] = at; change[5] = r.get(seq); change[6] = t; change[7] = r.get(rowPos); change[8] = id;
      change[9] = r.get(op); change[10] = r.get(eventTs); change[11] = r.get(kafkaTs);
      System.arraycopy(v, 0, change, 12, width);
      out.add(RowFactory.create(change));
    }
    Object[] record = new Object[12 + width + 1];
    record[0] = "session"; record[1] = topic; record[2] = name; record[3] = rows.get(0).get(partition);
    record[4] = table.lastOffset; record[5] = table.lastSeq;
    record[12 + width] = "{\"status\": \"open\", \"row_count\": " + table.rows.size() + ", \"last_seq\": "
        + table.lastSeq + "}";
    out.add(RowFactory.create(record));
    state.update(write(table));
    return out.iterator();
  }

  static Iterator<Row> violation(String topic, String name, Row r, String kind, int width) {
    Object[] v = new Object[12 + width + 1];
    v[0] = "violation"; v[1] = topic; v[2] = name; v[3] = r.getAs("partition"); v[4] = r.getAs("offset");
    v[5] = r.getAs("seq"); v[12 + width] = "{\"kind\": \"" + kind + "\"}";
    return List.of(RowFactory.create(v)).iterator();
  }

  static byte[] write(SessionTable table) throws IOException {
    ByteArrayOutputStream bytes = new ByteArrayOutputStream();
    try (ObjectOutputStream out = new ObjectOutputStream(bytes)) {
      out.writeObject(table);
    }
    return bytes.toByteArray();
  }

  static SessionTable read(byte[] blob) throws IOException, ClassNotFoundException {
    try (ObjectInputStream in = new ObjectInputStream(new ByteArrayInputStream(blob))) {
      return (SessionTable) in.readObject();
    }
  }
}
