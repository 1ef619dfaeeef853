package reconstructor.jvm;

import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.GroupStateTimeout;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.types.StructType;

/**
 * The JVM engine's entry point: the parsed records grouped by {@code (topic, group_session)} and
 * rebuilt by {@link StateFunction} in Spark's {@code flatMapGroupsWithState}, with the same output
 * records as the Python engine's {@code applyInPandasWithState} step, so the sinks take either.
 */
public final class Engine {
  /** The engine's version, which the driver checks against the one it was released with. */
  public static final String VERSION = "4";

  private Engine() {}

  /**
   * What {@link EngineSettings} read from {@code settingsJson}, field by field, as JSON (the chain
   * key as its SHA-256, never the key): the driver's test holds it to the Python spec.
   */
  public static String describe(String settingsJson) {
    return new EngineSettings(settingsJson).describe();
  }

  /** {@code records}: the parse stage's columns; {@code settingsJson}: see {@link EngineSettings}. */
  public static Dataset<Row> reconstruct(Dataset<Row> records, String settingsJson) {
    EngineSettings cfg = new EngineSettings(settingsJson);
    StructType stateSchema = StructType.fromDDL(cfg.stateDdl);
    StructType recordsSchema = StructType.fromDDL(cfg.recordsDdl);
    StructType keySchema = StructType.fromDDL("topic STRING, group_session STRING");
    boolean instants = Boolean.parseBoolean(
        records.sparkSession().conf().get("spark.sql.datetime.java8API.enabled", "false"));
    Layout in = new Layout(records.schema(), cfg.names, cfg.types, instants);
    // Grouped by the columns themselves, not by a key function: a key function (groupByKey) makes
    // every input row a Row object in the read stage just to call it.
    return records.groupBy(records.col("topic"), records.col("group_session"))
        .as(Encoders.row(keySchema), Encoders.row(records.schema()))
        .flatMapGroupsWithState(new StateFunction(cfg, in, stateSchema, recordsSchema), OutputMode.Append(),
                                Encoders.row(stateSchema), Encoders.row(recordsSchema),
                                GroupStateTimeout.ProcessingTimeTimeout());
  }
}
