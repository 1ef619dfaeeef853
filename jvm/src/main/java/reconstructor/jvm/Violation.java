package reconstructor.jvm;

import java.io.Serializable;
import java.math.BigInteger;

/**
 * One record of the {@code violations} table, or the violation that stops the query: the kind,
 * the record's coordinates, the expected and found seq and what was wrong. It travels to the
 * driver as the JSON the Python engine's {@code IntegrityViolation.to_json} writes.
 */
final class Violation implements Serializable {
  static final String GAP = "GAP", DUPLICATE = "DUPLICATE", NO_SNAPSHOT = "NO_SNAPSHOT",
      PARTITION_MOVED = "PARTITION_MOVED", AFTER_END = "AFTER_END", UNKNOWN_ROW = "UNKNOWN_ROW",
      MALFORMED = "MALFORMED", DATA_LOSS = "DATA_LOSS", SNAPSHOT_DRIFT = "SNAPSHOT_DRIFT", SKIPPED = "SKIPPED";

  final String kind;
  final String topic;
  final Integer partition;
  final Long offset;
  final String session;
  /** A seq past the largest long is still named exactly, as Python's ints name it. */
  final BigInteger expectedSeq;
  final Long foundSeq;
  final String detail;
  final String value;

  Violation(String kind, String topic, Integer partition, Long offset, String session, BigInteger expectedSeq,
            Long foundSeq, String detail, String value) {
    this.kind = kind;
    this.topic = topic;
    this.partition = partition;
    this.offset = offset;
    this.session = session;
    this.expectedSeq = expectedSeq;
    this.foundSeq = foundSeq;
    this.detail = detail;
    this.value = value;
  }

  static BigInteger after(Long seq) {
    return seq == null ? null : BigInteger.valueOf(seq).add(BigInteger.ONE);
  }

  static BigInteger exactly(Long seq) {
    return seq == null ? null : BigInteger.valueOf(seq);
  }

  Violation withValue(String raw) {
    return new Violation(kind, topic, partition, offset, session, expectedSeq, foundSeq, detail, raw);
  }

  String toJson() {
    StringBuilder out = new StringBuilder(128).append("{\"kind\": ");
    Text.jsonString(out, kind);
    out.append(", \"topic\": ");
    string(out, topic);
    out.append(", \"partition\": ").append(partition);
    out.append(", \"offset\": ").append(offset);
    out.append(", \"session\": ");
    string(out, session);
    out.append(", \"expected_seq\": ").append(expectedSeq);
    out.append(", \"found_seq\": ").append(foundSeq);
    out.append(", \"detail\": ");
    string(out, detail);
    out.append(", \"value\": ");
    string(out, value);
    return out.append('}').toString();
  }

  private static void string(StringBuilder out, String s) {
    if (s == null) {
      out.append("null");
    } else {
      Text.jsonString(out, s);
    }
  }
}
