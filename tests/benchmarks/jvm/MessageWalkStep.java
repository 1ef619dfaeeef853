package reconstructor.bench;

import java.util.Collections;
import java.util.List;

import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.StructType;

/**
 * The floor benchmark's trivial JVM stateful step over messages (not the product): one row per
 * Kafka record with its typed rows as an array, grouped as the engine groups it; the function walks
 * every row of every message and reads each of its values, testing each double for a finite value
 * and each text for emptiness (the kind of check the parse stage runs on exploded rows), and keeps
 * a count. What reading the rows out of arrays costs the function, beside what the operator costs.
 */
public final class MessageWalkStep {
  private MessageWalkStep() {}

  public static Dataset<Row> apply(Dataset<Row> messages) {
    StructType key = StructType.fromDDL("topic STRING, group_session STRING");
    StructType out = StructType.fromDDL("topic STRING, session STRING, rows BIGINT");
    StructType state = StructType.fromDDL("rows BIGINT");
    int typedRows = messages.schema().fieldIndex("typed_rows");
    FlatMapGroupsWithStateFunction<Row, Row, Row, Row> walk = (k, rows, st) -> {
      long n = st.exists() ? st.get().getLong(0) : 0;
      while (rows.hasNext()) {
        Row m = rows.next();
        if (m.isNullAt(typedRows)) {
          continue;
        }
        List<Row> changes = m.getList(typedRows);
        for (Row change : changes) {
          if (change.isNullAt(0) || change.getString(0).isEmpty()) {
            continue;
          }
          Row values = change.isNullAt(2) ? null : change.getStruct(2);
          if (values != null) {
            for (int i = 0; i < values.length(); i++) {
              Object v = values.get(i);
              if (v instanceof Double && !Double.isFinite((Double) v)) {
                continue;
              }
              if (v instanceof String && ((String) v).isEmpty()) {
                continue;
              }
            }
          }
          n++;
        }
      }
      st.update(RowFactory.create(n));
      return Collections.singletonList(
          RowFactory.create(k.getString(0), k.isNullAt(1) ? null : k.getString(1), n)).iterator();
    };
    return messages.groupBy(messages.col("topic"), messages.col("group_session"))
        .as(Encoders.row(key), Encoders.row(messages.schema()))
        .flatMapGroupsWithState(walk, OutputMode.Append(), Encoders.row(state), Encoders.row(out),
                                GroupStateTimeout.NoTimeout());
  }
}
