package reconstructor.bench;

import java.util.Collections;
import java.io.Serializable;

import org.apache.spark.api.java.function.FlatMapGroupsWithStateFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.StructType;

/**
 * The floor benchmark's trivial JVM stateful step (not the product): the JVM engine's own input,
 * grouped as the engine groups it, each group's rows counted into a long kept in the state, one row
 * out per group. What Spark's {@code flatMapGroupsWithState} costs over that input whatever the
 * function does: the shuffle and sort of the wide rows, each row handed over as a {@code Row}, the
 * state store. The engine's step over it is then what the reconstructor's own function costs.
 */
public final class TrivialStateStep {
  private TrivialStateStep() {}

  /** What one input row adds to its group's count; shipped to the executors with the function. */
  interface RowCount extends Serializable {
    long of(Row row);
  }

  public static Dataset<Row> apply(Dataset<Row> records) {
    return counting(records, r -> 1);
  }

  /** {@code records} grouped by {@code (topic, group_session)}, as the engine groups them, each
   * group's {@code count} of its input rows added to a long kept in the state, one row out per group. */
  static Dataset<Row> counting(Dataset<Row> records, RowCount count) {
    StructType key = StructType.fromDDL("topic STRING, group_session STRING");
    StructType out = StructType.fromDDL("topic STRING, session STRING, rows BIGINT");
    StructType state = StructType.fromDDL("rows BIGINT");
    FlatMapGroupsWithStateFunction<Row, Row, Row, Row> step = (k, rows, st) -> {
      long n = st.exists() ? st.get().getLong(0) : 0;
      while (rows.hasNext()) {
        n += count.of(rows.next());
      }
      st.update(RowFactory.create(n));
      return Collections.singletonList(
          RowFactory.create(k.getString(0), k.isNullAt(1) ? null : k.getString(1), n)).iterator();
    };
    return records.groupBy(records.col("topic"), records.col("group_session"))
        .as(Encoders.row(key), Encoders.row(records.schema()))
        .flatMapGroupsWithState(step, OutputMode.Append(), Encoders.row(state), Encoders.row(out),
                                GroupStateTimeout.NoTimeout());
  }
}
