package reconstructor.jvm;

import java.io.IOException;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * What the Python driver hands the JVM engine for one query, as JSON
 * ({@code reconstructor.spark.jvm_engine.engine_json}): the stateful step's spec
 * ({@code reconstructor.core.step_spec.StepSpec}: the row schema, the timeouts, the integrity
 * policy, the chain key) and what the query's start adds ({@code StepStart}: the data losses the
 * checkpoint recorded, a replay's chain and session seeds), versioned as {@link Engine#VERSION}.
 */
final class EngineSettings implements Serializable {
  /** A loss of offsets {@code first..} of a partition, and its detail. */
  static final class Loss implements Serializable {
    final long first;
    final String detail;

    Loss(long first, String detail) {
      this.first = first;
      this.detail = detail;
    }
  }

  final String schemaName;
  final String[] names;
  final String[] types;
  final long timeoutMs;
  final long retentionMs;
  final boolean awaitSnapshot;
  final boolean quarantine;
  final String onDrift;
  /** By "topic\0partition", sorted by first offset lost. */
  final Map<String, List<Loss>> losses = new HashMap<>();
  final String chainKey;
  /** A replay's seeds: topic, session and seq of a snapshot the tables hold -> its chain_prev and chain_digest there. */
  final Map<String, String[]> chainSeeds = new HashMap<>();
  /** A replay's session seeds (the Python engine's {@code core.seed}), by "topic\0session". */
  final Map<String, Seed> sessionSeeds = new HashMap<>();
  final String stateDdl;
  final String recordsDdl;
  /** How the parse stage reads a time: its grammar, and the range of epoch microseconds it carries. */
  final String timestampPattern;
  final long timeRangeUs;
  final String timeRangeText;

  EngineSettings(String json) {
    JsonNode root;
    try {
      root = new ObjectMapper().readTree(json);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    JsonNode version = root.get("version");
    if (version == null || !Engine.VERSION.equals(version.asText())) {
      throw new IllegalArgumentException("engine settings of version " + version + "; this engine reads version "
                                         + Engine.VERSION + ": the driver and the engine jar differ, rebuild the jar");
    }
    schemaName = root.get("schema_name").asText();
    JsonNode columns = root.get("columns");
    names = new String[columns.size()];
    types = new String[columns.size()];
    for (int i = 0; i < columns.size(); i++) {
      names[i] = columns.get(i).get(0).asText();
      types[i] = columns.get(i).get(1).asText();
    }
    timeoutMs = root.get("session_timeout_ms").asLong();
    retentionMs = root.get("state_retention_ms").asLong();
    awaitSnapshot = root.get("await_snapshot").asBoolean();
    quarantine = "quarantine".equals(root.get("on_violation").asText());
    onDrift = root.get("on_drift").asText();
    for (JsonNode loss : root.get("losses")) {
      losses.computeIfAbsent(loss.get(0).asText() + "\u0000" + loss.get(1).asInt(), k -> new ArrayList<>())
          .add(new Loss(loss.get(2).asLong(), loss.get(4).asText()));
    }
    for (List<Loss> partition : losses.values()) {
      partition.sort((a, b) -> Long.compare(a.first, b.first));
    }
    chainKey = root.get("chain_key").isNull() ? null : root.get("chain_key").asText();
    for (JsonNode seed : root.get("chain_seeds")) {
      chainSeeds.put(seed.get(0).asText() + "\u0000" + seed.get(1).asText() + "\u0000" + seed.get(2).asLong(),
                     new String[] {seed.get(3).asText(), seed.get(4).asText()});
    }
    readSessionSeeds(root.get("session_seeds"));
    stateDdl = root.get("state_ddl").asText();
    recordsDdl = root.get("records_ddl").asText();
    timestampPattern = root.get("timestamp_pattern").asText();
    timeRangeUs = root.get("time_range_us").asLong();
    timeRangeText = root.get("time_range_text").asText();
  }

  /** A session as the output's tables hold it, that a replay starts where it has no state. */
  static final class Seed implements Serializable {
    final SessionState state;
    final String chainHead;
    final long expiresMs;

    Seed(SessionState state, String chainHead, long expiresMs) {
      this.state = state;
      this.chainHead = chainHead;
      this.expiresMs = expiresMs;
    }
  }

  /** The seeds' JSON document ({@code core.seed.SessionSeeds.to_json}): row values in its
   * {@code columns} order, a time as epoch microseconds; a column it lacks is null. */
  private void readSessionSeeds(JsonNode doc) {
    if (doc == null || doc.isNull()) {
      return;
    }
    JsonNode columns = doc.get("columns");
    int[] at = new int[names.length];
    for (int i = 0; i < names.length; i++) {
      at[i] = -1;
      for (int j = 0; j < columns.size(); j++) {
        if (names[i].equals(columns.get(j).asText())) {
          at[i] = j;
        }
      }
    }
    for (JsonNode entry : doc.get("seeds")) {
      JsonNode d = entry.get(2);
      SessionState s = new SessionState();
      s.partition = d.get("partition").asInt();
      s.status = d.get("status").asText();
      s.firstSeq = longOrNull(d.get("first_seq"));
      s.lastSeq = longOrNull(d.get("last_seq"));
      s.lastOffset = longOrNull(d.get("last_offset"));
      s.snapshotSeq = longOrNull(d.get("snapshot_seq"));
      s.snapshotOffset = longOrNull(d.get("snapshot_offset"));
      s.startedUs = longOrNull(d.get("started_us"));
      s.lastEventUs = longOrNull(d.get("last_event_us"));
      s.table = new SessionTable();
      for (JsonNode row : d.get("rows")) {
        Object[] values = new Object[names.length];
        for (int i = 0; i < names.length; i++) {
          values[i] = at[i] < 0 ? null : value(row.get(at[i] + 1), types[i]);
        }
        s.table.put(row.get(0).asText(), values);
      }
      JsonNode head = d.get("chain_head");
      sessionSeeds.put(entry.get(0).asText() + "\u0000" + entry.get(1).asText(),
                       new Seed(s, head == null || head.isNull() ? null : head.asText(), d.get("expires_ms").asLong()));
    }
  }

  private static Long longOrNull(JsonNode v) {
    return v == null || v.isNull() ? null : v.asLong();
  }

  private static Object value(JsonNode v, String type) {
    if (v == null || v.isNull()) {
      return null;
    }
    switch (type) {
      case "string": return v.asText();
      case "double": return v.asDouble();
      case "boolean": return v.asBoolean();
      default: return v.asLong();  // long, timestamp (epoch microseconds)
    }
  }

  /** The seed a session with no state starts from at processing time {@code nowMs}, or null. */
  Seed seed(String topic, String session, long nowMs) {
    Seed seed = heldSeed(topic, session);
    return seed != null && nowMs < seed.expiresMs ? seed : null;
  }

  /** The session's seed, expired or not: the records it holds are the tables' at any time. */
  Seed heldSeed(String topic, String session) {
    if (sessionSeeds.isEmpty() || session == null) {
      return null;
    }
    return sessionSeeds.get(topic + "\u0000" + session);
  }

  /** What this object read, field by field, as JSON ({@link Engine#describe}). */
  String describe() {
    ObjectMapper json = new ObjectMapper();
    ObjectNode out = json.createObjectNode();
    out.put("version", Engine.VERSION);
    out.put("schema_name", schemaName);
    ArrayNode cols = out.putArray("columns");
    for (int i = 0; i < names.length; i++) {
      cols.addArray().add(names[i]).add(types[i]);
    }
    out.put("session_timeout_ms", timeoutMs);
    out.put("state_retention_ms", retentionMs);
    out.put("await_snapshot", awaitSnapshot);
    out.put("on_violation", quarantine ? "quarantine" : "fail");
    out.put("on_drift", onDrift);
    ArrayNode lost = out.putArray("losses");
    for (Map.Entry<String, List<Loss>> e : new TreeMap<>(losses).entrySet()) {
      String[] at = e.getKey().split("\u0000", -1);
      for (Loss loss : e.getValue()) {
        lost.addArray().add(at[0]).add(Integer.parseInt(at[1])).add(loss.first).add(loss.detail);
      }
    }
    out.put("chain_key_sha256", chainKey == null ? null : sha256(chainKey));
    ArrayNode links = out.putArray("chain_seeds");
    for (Map.Entry<String, String[]> e : new TreeMap<>(chainSeeds).entrySet()) {
      String[] at = e.getKey().split("\u0000", -1);
      links.addArray().add(at[0]).add(at[1]).add(Long.parseLong(at[2])).add(e.getValue()[0]).add(e.getValue()[1]);
    }
    ArrayNode seeds = out.putArray("session_seeds");
    for (Map.Entry<String, Seed> e : new TreeMap<>(sessionSeeds).entrySet()) {
      String[] at = e.getKey().split("\u0000", -1);
      SessionState s = e.getValue().state;
      seeds.addArray().add(at[0]).add(at[1]).add(s.partition).add(s.status).add(s.firstSeq).add(s.lastSeq)
          .add(s.lastOffset).add(s.snapshotSeq).add(s.snapshotOffset).add(s.startedUs).add(s.lastEventUs)
          .add(e.getValue().chainHead).add(e.getValue().expiresMs).add(s.table.size());
    }
    out.put("state_ddl", stateDdl);
    out.put("records_ddl", recordsDdl);
    out.put("timestamp_pattern", timestampPattern);
    out.put("time_range_us", timeRangeUs);
    out.put("time_range_text", timeRangeText);
    return out.toString();
  }

  private static String sha256(String text) {
    try {
      return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8)));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  boolean audits() {
    return !"ignore".equals(onDrift);
  }

  boolean failOnDrift() {
    return "fail".equals(onDrift);
  }

  /** The loss that sets this session aside (quarantine mode): the first one on its partition past
   * its last applied record, while it could still receive records (open or timed out). */
  Violation lossReaching(String topic, String session, SessionState s) {
    if (losses.isEmpty() || s == null || !(s.is(SessionState.OPEN) || s.is(SessionState.TIMED_OUT)) || s.lastOffset == null) {
      return null;
    }
    for (Loss loss : losses.getOrDefault(topic + "\u0000" + s.partition, List.of())) {
      if (loss.first > s.lastOffset) {
        return new Violation(Violation.DATA_LOSS, topic, s.partition, loss.first, session, Violation.after(s.lastSeq),
                             null, loss.detail, null);
      }
    }
    return null;
  }
}
