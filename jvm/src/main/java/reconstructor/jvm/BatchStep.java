package reconstructor.jvm;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * One session's micro-batch: its records checked in Kafka order against the carried state and
 * the valid ones applied to its table. In fail mode the first violation is the verdict and nothing
 * applies; in quarantine mode the walk goes on past it: the session is set aside until its next
 * snapshot, and every record it refused is recorded. The Python engine's {@code core.batch} and
 * {@code core.quarantine} are the specification; this is the same walk written record by record.
 */
final class BatchStep {
  static final String SET_ASIDE = "set aside: the session is quarantined until its next snapshot";

  private final String topic;
  private final String session;
  private final EngineSettings cfg;

  /** The applied row changes, in apply order. */
  final List<Change> changes = new ArrayList<>();
  /** What goes to the {@code violations} table, in Kafka order. */
  final List<Violation> recorded = new ArrayList<>();
  /** The violation that fails the query (nothing of the batch is then written). */
  Violation violation;
  /** The session after the batch (null: nothing applied to a new session). */
  SessionState state;
  /** Whether {@link #state} is other than the state given (else the records were only set aside). */
  boolean changed;

  private BatchStep(String topic, String session, EngineSettings cfg) {
    this.topic = topic;
    this.session = session;
    this.cfg = cfg;
  }

  static BatchStep run(String topic, String session, List<Message> msgs, SessionState given, EngineSettings cfg) {
    BatchStep step = new BatchStep(topic, session, cfg);
    step.state = given;
    if (msgs.isEmpty()) {
      return step;
    }
    if (session == null && cfg.quarantine) {
      step.recorded.addAll(records(topic, null, Continuity.kafkaOrder(msgs, null), Violation.MALFORMED,
                                   "the record names no session"));
      return step;
    }
    step.walk(msgs, given);
    return step;
  }

  private void walk(List<Message> rest, SessionState given) {
    SessionState current = given;
    while (true) {
      if (current != null && current.is(SessionState.QUARANTINED)) {
        List<Message> ordered = Continuity.kafkaOrder(rest, current);
        int resync = firstResync(ordered, current);
        recorded.addAll(records(topic, session, ordered.subList(0, resync), Violation.SKIPPED, SET_ASIDE));
        if (resync == ordered.size()) {
          break;
        }
        rest = ordered.subList(resync, ordered.size());
        current = current.copy();
        current.status = SessionState.OPEN;
        current.lastSeq = ordered.get(resync).seq - 1;
        changed = true;
      }
      Prefix step = validPrefix(rest, current);
      current = step.state;
      Violation v = step.violation;
      if (v == null) {
        break;
      }
      if (!cfg.quarantine || Violation.SNAPSHOT_DRIFT.equals(v.kind)) {
        fail(v, given);
        return;
      }
      if (current != null && current.is(SessionState.ENDED)) {
        // An ended session stays ended (no snapshot reopens it): every later record is AFTER_END.
        recorded.addAll(records(topic, session, Continuity.kafkaOrder(step.rest, current), Violation.AFTER_END,
                                "session ended at seq " + current.lastSeq + "; no message may follow its end"));
        break;
      }
      recorded.add(v);
      current = quarantine(current, v);
      changed = true;
      rest = step.rest;
      if (!resyncsAtOnce(rest, v, current)) {
        List<Message> left = new ArrayList<>(rest.size());
        for (Message m : rest) {
          if (m.partition != v.partition || m.offset != v.offset) {
            left.add(m);
          }
        }
        rest = left;
      }
      if (rest.isEmpty()) {
        break;
      }
    }
    state = current;
  }

  private void fail(Violation v, SessionState given) {
    violation = v;
    state = given;
    changed = false;
    changes.clear();
    recorded.clear();
  }

  private static SessionState quarantine(SessionState s, Violation v) {
    if (s == null) {
      return SessionState.quarantinedNew(v.partition);
    }
    SessionState q = s.copy();
    q.status = SessionState.QUARANTINED;
    return q;
  }

  /** One valid prefix, applied: the state after it, the first violation after it, and the records
   * from that violation's on. */
  private static final class Prefix {
    SessionState state;
    Violation violation;
    List<Message> rest = List.of();
  }

  private Prefix validPrefix(List<Message> msgs, SessionState current) {
    Continuity checked = Continuity.check(topic, session, msgs, current, cfg.awaitSnapshot);
    List<Message> m = checked.messages;
    int skipped = checked.skipped, cut = checked.cut;
    Prefix out = new Prefix();
    out.state = current;
    if (cut <= skipped) {
      out.violation = withValue(checked.violation, m, cut);
      out.rest = cut < m.size() ? m.subList(cut, m.size()) : List.of();
      return out;
    }
    boolean known = current != null && current.snapshotSeq != null;
    SessionTable table = current != null && current.table != null ? current.table : new SessionTable();
    int applied = skipped;
    Violation rejected = null;
    List<Violation> drifts = new ArrayList<>();
    int changesBefore = changes.size();
    for (int i = skipped; i < cut; i++) {
      Message msg = m.get(i);
      Violation refused;
      if (msg.is("snapshot")) {
        refused = snapshotProblem(msg);
        if (refused == null && known && cfg.audits()) {
          String drift = table.driftFrom(msg.rows);
          if (drift != null) {
            Violation d = finding(Violation.SNAPSHOT_DRIFT, msg, drift);
            if (cfg.failOnDrift()) {
              refused = d;
            } else {
              drifts.add(d);
            }
          }
        }
        if (refused == null) {
          known = true;
          table = applySnapshot(msg, table);
        }
      } else {
        refused = unknownDelete(msg, table);
        if (refused == null) {
          applyUpdates(msg, table);
        }
      }
      if (refused != null) {
        rejected = withValue(refused, m, i);
        break;
      }
      applied = i + 1;
    }
    if (rejected != null) {
      // The refused record is the verdict; in quarantine mode the messages before it apply.
      if (!cfg.quarantine || Violation.SNAPSHOT_DRIFT.equals(rejected.kind) || applied == skipped) {
        changes.subList(changesBefore, changes.size()).clear();
        out.violation = rejected;
        out.rest = m.subList(applied, m.size());
        return out;
      }
      out.violation = rejected;
      out.rest = m.subList(applied, m.size());
    } else {
      out.violation = withValue(checked.violation, m, cut);
      out.rest = cut < m.size() ? m.subList(cut, m.size()) : List.of();
    }
    for (Violation d : drifts) {
      recorded.add(d);
    }
    out.state = after(checked.partition, current, m.subList(skipped, applied), table);
    changed = true;
    return out;
  }

  private static SessionState after(int partition, SessionState before, List<Message> valid, SessionTable table) {
    Message first = valid.get(0), last = valid.get(valid.size() - 1);
    SessionState s = new SessionState();
    s.partition = partition;
    s.status = last.is("end") ? SessionState.ENDED : SessionState.OPEN;
    s.firstSeq = before != null && before.firstSeq != null ? before.firstSeq : first.seq;
    s.lastSeq = last.seq;
    s.lastOffset = last.offset;
    s.snapshotSeq = before != null ? before.snapshotSeq : null;
    s.snapshotOffset = before != null ? before.snapshotOffset : null;
    for (Message msg : valid) {
      if (msg.is("snapshot")) {
        s.snapshotSeq = msg.seq;
        s.snapshotOffset = msg.offset;
      }
    }
    s.startedUs = before != null && before.startedUs != null ? before.startedUs : first.eventUs;
    s.lastEventUs = last.eventUs;
    s.table = table;
    return s;
  }

  /** A snapshot applied: the rows it drops are deletes (in code point order of their ids), then its
   * own rows; the table becomes the snapshot. */
  private SessionTable applySnapshot(Message msg, SessionTable table) {
    Set<String> incoming = new HashSet<>();
    for (Message.RowChange c : msg.rows) {
      incoming.add(c.rowId);
    }
    List<String> dropped = new ArrayList<>();
    for (String id : table.rows.keySet()) {
      if (!incoming.contains(id)) {
        dropped.add(id);
      }
    }
    dropped.sort(Text.CODE_POINTS);
    Object[] nulls = new Object[cfg.names.length];
    for (String id : dropped) {
      changes.add(new Change(msg, -1, id, "delete", nulls));
    }
    SessionTable next = new SessionTable();
    for (Message.RowChange c : msg.rows) {
      changes.add(new Change(msg, c.rowPos, c.rowId, c.op, c.values));
      next.put(c.rowId, c.values);
    }
    return next;
  }

  private void applyUpdates(Message msg, SessionTable table) {
    for (Message.RowChange c : msg.rows) {
      if ("delete".equals(c.op)) {
        table.rows.remove(c.rowId);
      } else {
        table.put(c.rowId, c.values);
      }
      changes.add(new Change(msg, c.rowPos, c.rowId, c.op, c.values));
    }
  }

  /** A delete of a row that does not exist just before it. */
  private Violation unknownDelete(Message msg, SessionTable table) {
    Map<String, Boolean> own = null;
    for (Message.RowChange c : msg.rows) {
      boolean delete = "delete".equals(c.op);
      if (delete) {
        Boolean exists = own == null ? null : own.get(c.rowId);
        if (!(exists != null ? exists : table.rows.containsKey(c.rowId))) {
          return finding(Violation.UNKNOWN_ROW, msg,
                         "delete of row " + Text.pyRepr(c.rowId) + ", which is not in the session's table");
        }
      }
      if (own == null) {
        own = new HashMap<>();
      }
      own.put(c.rowId, !delete);
    }
    return null;
  }

  /** Why a snapshot's rows cannot be a table (a delete, a row twice), or null. */
  private Violation snapshotProblem(Message msg) {
    String why = problemOf(msg);
    return why == null ? null : finding(Violation.MALFORMED, msg, why);
  }

  static String problemOf(Message msg) {
    for (Message.RowChange c : msg.rows) {
      if ("delete".equals(c.op)) {
        return "a snapshot carries whole rows, not deletes (row " + Text.pyRepr(c.rowId) + ")";
      }
    }
    Set<String> seen = new HashSet<>();
    for (Message.RowChange c : msg.rows) {
      if (!seen.add(c.rowId)) {
        return "row " + Text.pyRepr(c.rowId) + " appears twice in one snapshot";
      }
    }
    return null;
  }

  /** What the session table found wrong with a record: named by its seq as expected and found. */
  private Violation finding(String kind, Message msg, String detail) {
    return new Violation(kind, topic, msg.partition, msg.offset, session, Violation.exactly(msg.seq), msg.seq,
                         detail, null);
  }

  private static Violation withValue(Violation v, List<Message> m, int at) {
    return v == null || at >= m.size() || m.get(at).value == null ? v : v.withValue(m.get(at).value);
  }

  /** Whether the record of violation {@code v} (the first of {@code rest}) resyncs the session it
   * just quarantined: a GAP on a well-formed snapshot (a DUPLICATE snapshot is old data). */
  private static boolean resyncsAtOnce(List<Message> rest, Violation v, SessionState current) {
    if (!Violation.GAP.equals(v.kind) || rest.isEmpty()) {
      return false;
    }
    return firstResync(Continuity.kafkaOrder(rest, current).subList(0, 1), current) == 0;
  }

  /** The first well-formed snapshot on the session's partition with a seq past the last one
   * applied, else the number of messages: an older snapshot delivered again is old data. */
  private static int firstResync(List<Message> ordered, SessionState s) {
    for (int i = 0; i < ordered.size(); i++) {
      Message m = ordered.get(i);
      boolean newer = s.lastSeq == null || (m.seq != null && m.seq > s.lastSeq);
      if (m.is("snapshot") && !m.isBad() && m.partition == s.partition && newer && problemOf(m) == null) {
        return i;
      }
    }
    return ordered.size();
  }

  /** One recorded row per message; a malformed one says why it is malformed, too. */
  static List<Violation> records(String topic, String session, List<Message> msgs, String kind, String detail) {
    List<Violation> out = new ArrayList<>(msgs.size());
    for (Message m : msgs) {
      String text = m.bad == null ? detail : Violation.MALFORMED.equals(kind) ? m.bad : detail + " (malformed: " + m.bad + ")";
      out.add(new Violation(kind, topic, m.partition, m.offset, session, null, m.seq, text, m.value));
    }
    return out;
  }

}
