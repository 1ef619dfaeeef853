package reconstructor.jvm;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The change log's hash chain, bit for bit as the Python engine's {@code core.chain}: each
 * message with rows digested as RFC 8785 JSON with the digest before it, SHA-256 or with a key
 * HMAC-SHA256, written {@code sha256:<hex>} or {@code hmac-sha256:<hex>}.
 */
final class Chain implements java.io.Serializable {
  static final String START = "";

  private final byte[] key;
  private final String[] names;
  private final String[] types;
  /** The row columns in JCS member order (UTF-16 code units), as indexes into the row's values. */
  private final int[] memberOrder;
  /** One digest per task, made on first use (a JCA lookup and a key schedule per message cost more
   * than the hash). */
  private transient MessageDigest sha;
  private transient Mac mac;

  Chain(String key, String[] names, String[] types) {
    this.key = key == null || key.isEmpty() ? null : key.getBytes(StandardCharsets.UTF_8);
    this.names = names;
    this.types = types;
    Integer[] order = new Integer[names.length];
    for (int i = 0; i < order.length; i++) {
      order[i] = i;
    }
    java.util.Arrays.sort(order, Comparator.comparing(i -> names[i]));  // String order: UTF-16 code units
    memberOrder = new int[order.length];
    for (int i = 0; i < order.length; i++) {
      memberOrder[i] = order[i];
    }
  }

  /** Each change's {@code chain_prev} and {@code chain_digest} (row for row, in apply order), and
   * the chain's head after them, from {@code prev}. A message's changes are contiguous. */
  String digest(String topic, String session, List<Change> changes, String prev, String[] prevs, String[] digests) {
    int n = changes.size();
    int a = 0;
    while (a < n) {
      Message msg = changes.get(a).message;
      int b = a;
      while (b < n && changes.get(b).message.offset == msg.offset && changes.get(b).message.partition == msg.partition) {
        b++;
      }
      String head = hash(prev, canonical(topic, session, msg, changes.subList(a, b)));
      for (int i = a; i < b; i++) {
        prevs[i] = prev;
        digests[i] = head;
      }
      prev = head;
      a = b;
    }
    return prev;
  }

  /** The first bytes of a session seal's HMAC input: no message digest's input starts so. */
  static final byte[] SEAL_DOMAIN = "reconstructor.session-seal.v2\n".getBytes(StandardCharsets.US_ASCII);

  /** A session row's seal, as the Python engine's {@code core.seal.session_seal}: the HMAC of
   * {@link #SEAL_DOMAIN} and the sealed fields as RFC 8785 JSON (integers as decimal strings, a
   * null left out); null without a key. */
  String seal(String topic, String session, Integer partition, String status, Long firstSeq, Long lastSeq,
              Long lastOffset, long rowCount, String head) {
    if (key == null) {
      return null;
    }
    StringBuilder j = new StringBuilder(256).append('{');
    if (head != null) {
      j.append("\"chain_head\":");
      Text.jsonString(j, head);
      j.append(',');
    }
    member(j, "first_seq", firstSeq);
    member(j, "last_offset", lastOffset);
    member(j, "last_seq", lastSeq);
    member(j, "partition", partition == null ? null : (long) partition);
    member(j, "row_count", rowCount);
    j.append("\"session\":");
    Text.jsonString(j, session);
    j.append(",\"status\":");
    Text.jsonString(j, status);
    j.append(",\"topic\":");
    Text.jsonString(j, topic);
    byte[] canonical = j.append('}').toString().getBytes(StandardCharsets.UTF_8);
    try {
      Mac m = mac();
      m.update(SEAL_DOMAIN);
      return hex("hmac-sha256:", m.doFinal(canonical));  // and resets it, keeping the key
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException(e);
    }
  }

  private static void member(StringBuilder j, String name, Long value) {
    if (value != null) {
      j.append('"').append(name).append("\":\"").append(value.longValue()).append("\",");
    }
  }

  /** The HMAC of the key, one per task, made on first use. */
  private Mac mac() throws GeneralSecurityException {
    if (mac == null) {
      mac = Mac.getInstance("HmacSHA256");
      mac.init(new SecretKeySpec(key, "HmacSHA256"));
    }
    return mac;
  }

  /** {@code scheme} and the bytes in lower-case hex. */
  private static String hex(String scheme, byte[] out) {
    StringBuilder hex = new StringBuilder(scheme);
    for (byte x : out) {
      hex.append(Character.forDigit((x >> 4) & 0xf, 16)).append(Character.forDigit(x & 0xf, 16));
    }
    return hex.toString();
  }

  private String hash(String prev, byte[] canonical) {
    try {
      byte[] head = (prev + "\n").getBytes(StandardCharsets.US_ASCII);
      byte[] out;
      if (key == null) {
        if (sha == null) {
          sha = MessageDigest.getInstance("SHA-256");
        }
        sha.update(head);
        out = sha.digest(canonical);  // and resets it
      } else {
        Mac m = mac();
        m.update(head);
        out = m.doFinal(canonical);  // and resets it, keeping the key
      }
      return hex(key == null ? "sha256:" : "hmac-sha256:", out);
    } catch (GeneralSecurityException e) {
      throw new IllegalStateException(e);
    }
  }

  /** One message and its changes as RFC 8785 JSON bytes. */
  byte[] canonical(String topic, String session, Message msg, List<Change> changes) {
    List<Change> ordered = new ArrayList<>(changes);
    ordered.sort(Comparator.<Change>comparingInt(c -> c.rowPos).thenComparing(c -> c.rowId, Text.CODE_POINTS));
    StringBuilder out = new StringBuilder(256).append("{\"changes\":[");
    for (int r = 0; r < ordered.size(); r++) {
      Change c = ordered.get(r);
      out.append(r > 0 ? ",{\"op\":" : "{\"op\":");
      Text.jsonString(out, c.op);
      out.append(",\"row_id\":");
      Text.jsonString(out, c.rowId);
      out.append(",\"row_pos\":\"").append(c.rowPos).append("\",\"values\":{");
      boolean first = true;
      for (int i : memberOrder) {
        Object v = c.values[i];
        if (SessionTable.isNull(v)) {
          continue;
        }
        out.append(first ? "" : ",");
        first = false;
        Text.jsonString(out, names[i]);
        out.append(':');
        value(out, types[i], v);
      }
      out.append("}}");
    }
    out.append(']');
    if (msg.eventUs != null) {
      out.append(",\"event_ts\":\"").append(msg.eventUs).append('"');
    }
    if (msg.kafkaUs != null) {
      out.append(",\"kafka_ts\":\"").append(msg.kafkaUs).append('"');
    }
    out.append(",\"offset\":\"").append(msg.offset).append("\",\"partition\":\"").append(msg.partition)
        .append("\",\"seq\":\"").append(msg.seq).append("\",\"session\":");
    Text.jsonString(out, session);
    out.append(",\"topic\":");
    Text.jsonString(out, topic);
    out.append(",\"type\":");
    Text.jsonString(out, msg.type);
    return out.append('}').toString().getBytes(StandardCharsets.UTF_8);
  }

  private static void value(StringBuilder out, String type, Object v) {
    switch (type) {
      case "string":
        Text.jsonString(out, (String) v);
        break;
      case "boolean":
        out.append(((Boolean) v) ? "true" : "false");
        break;
      case "double":
        double x = (Double) v;
        out.append(Double.isInfinite(x) ? (x > 0 ? "\"Infinity\"" : "\"-Infinity\"") : Text.jcsNumber(x));
        break;
      default:  // long, timestamp (epoch microseconds): decimal strings
        out.append('"').append(v).append('"');
    }
  }
}
