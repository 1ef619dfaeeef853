package reconstructor.bench;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;

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
    int typedRows = messages.schema().fieldIndex("typed_rows");
    return TrivialStateStep.counting(messages, m -> m.isNullAt(typedRows) ? 0 : walk(m.getList(typedRows)));
  }

  /** The message's rows that have an id, each of their values read and checked. */
  private static long walk(java.util.List<Row> changes) {
    long n = 0;
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
    return n;
  }
}
