package reconstructor.jvm;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;

/**
 * The order rules of one session's micro-batch, record by record in Kafka order: where the checks
 * start (a new session's first message must be a snapshot, or the messages before one are skipped
 * while awaiting it), where the valid prefix ends, and the violation there, named by the first
 * rule it breaks (malformed, after the end, a moved partition, then the seq). The Python engine's
 * {@code core.continuity} is the specification.
 */
final class Continuity {
  final List<Message> messages;
  final int partition;
  final int skipped;
  final int cut;
  final Violation violation;

  private Continuity(List<Message> messages, int partition, int skipped, int cut, Violation violation) {
    this.messages = messages;
    this.partition = partition;
    this.skipped = skipped;
    this.cut = cut;
    this.violation = violation;
  }

  /** A session's partition: the state's, else the one holding its lowest seq (the lower number
   * on a tie, or when no record has a seq). */
  static int home(List<Message> msgs, SessionState state) {
    if (state != null) {
      return state.partition;
    }
    Message best = null;
    int lowest = Integer.MAX_VALUE;
    for (Message m : msgs) {
      lowest = Math.min(lowest, m.partition);
      if (m.seq != null && (best == null || m.seq < best.seq || (m.seq.equals(best.seq) && m.partition < best.partition))) {
        best = m;
      }
    }
    return best == null ? lowest : best.partition;
  }

  /** The messages in Kafka order: the session's partition first, then by partition and offset. */
  static List<Message> kafkaOrder(List<Message> msgs, SessionState state) {
    int ref = home(msgs, state);
    List<Message> out = new ArrayList<>(msgs);
    out.sort(Comparator.<Message>comparingInt(m -> m.partition == ref ? 0 : 1)
        .thenComparingInt(m -> m.partition).thenComparingLong(m -> m.offset));
    return out;
  }

  static Continuity check(String topic, String session, List<Message> unordered, SessionState state,
                          boolean awaitSnapshot) {
    List<Message> m = kafkaOrder(unordered, state);
    int n = m.size();
    int partition = state != null ? state.partition : m.get(0).partition;
    int skipped;
    if (state != null) {
      skipped = 0;
    } else if ((m.get(0).is("snapshot") && !m.get(0).isBad()) || m.get(0).isBad()) {
      skipped = 0;
    } else if (!awaitSnapshot) {
      Message first = m.get(0);
      return new Continuity(m, partition, 0, 0, violation(Violation.NO_SNAPSHOT, topic, session, first, null,
          "a session's first message must be a snapshot, got " + (first.type == null ? "None" : Text.pyRepr(first.type))));
    } else {
      skipped = n;
      for (int i = 0; i < n; i++) {
        if (m.get(i).isBad() || m.get(i).is("snapshot")) {
          skipped = i;
          break;
        }
      }
    }
    if (skipped == n) {
      return new Continuity(m, partition, n, n, null);
    }
    int afterEnd = -1;
    if (state == null || !state.is(SessionState.ENDED)) {
      for (int i = skipped; i < n; i++) {
        if (m.get(i).is("end")) {
          afterEnd = i + 1;
          break;
        }
      }
    } else {
      afterEnd = 0;
    }
    int cut = n;
    for (int i = 0; i < n && i < cut; i++) {
      if (m.get(i).isBad() || m.get(i).partition != partition) {
        cut = i;
      }
    }
    if (afterEnd >= 0 && afterEnd < cut) {
      cut = afterEnd;
    }
    if (state != null && n > 0 && state.lastSeq != null && !follows(m.get(0).seqOrZero(), state.lastSeq)) {
      cut = 0;
    }
    for (int i = skipped + 1; i < Math.min(n, cut); i++) {
      if (m.get(i).seqOrZero() - m.get(i - 1).seqOrZero() != 1) {  // int64 arithmetic, as numpy's diff
        cut = i;
        break;
      }
    }
    if (cut == n) {
      return new Continuity(m, partition, skipped, n, null);
    }
    return new Continuity(m, partition, skipped, cut,
                          brokenRule(m, state, topic, session, partition, skipped, cut, afterEnd));
  }

  /** Whether {@code seq} is exactly one past {@code last} (no overflow). */
  private static boolean follows(long seq, long last) {
    return last != Long.MAX_VALUE && seq == last + 1;
  }

  private static Violation brokenRule(List<Message> m, SessionState state, String topic, String session,
                                      int partition, int skipped, int cut, int afterEnd) {
    Long previous = cut > skipped ? (Long) m.get(cut - 1).seqOrZero() : (state != null ? state.lastSeq : null);
    BigInteger expected = Violation.after(previous);
    Message at = m.get(cut);
    long found = at.seqOrZero();
    if (at.isBad()) {
      return violation(Violation.MALFORMED, topic, session, at, expected, at.bad);
    }
    if (cut == afterEnd) {
      Long endedAt = cut == 0 && state != null ? state.lastSeq : (Long) m.get(cut - 1).seqOrZero();
      return violation(Violation.AFTER_END, topic, session, at, null,
                       "session ended at seq " + endedAt + "; no message may follow its end");
    }
    if (at.partition != partition) {
      return violation(Violation.PARTITION_MOVED, topic, session, at, expected,
                       "session was on " + topic + "[" + partition + "] and shows up on " + topic + "[" + at.partition + "]");
    }
    if (expected != null && BigInteger.valueOf(found).compareTo(expected) < 0) {
      return violation(Violation.DUPLICATE, topic, session, at, expected,
                       "seq " + found + " was already seen (last applied seq " + previous + ")");
    }
    return violation(Violation.GAP, topic, session, at, expected,
                     "missing seq " + expected + ".." + BigInteger.valueOf(found).subtract(BigInteger.ONE));
  }

  static Violation violation(String kind, String topic, String session, Message at, BigInteger expected, String detail) {
    return new Violation(kind, topic, at.partition, at.offset, session, expected, at.seq, detail, null);
  }
}
