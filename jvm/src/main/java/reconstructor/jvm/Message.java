package reconstructor.jvm;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.Row;

/**
 * One Kafka record of a session's micro-batch and its rows, as the parse stage left them: its
 * coordinates and type from its first row, why it is malformed (null when it is not), and its row
 * changes in {@code row_pos} order.
 */
final class Message {
  /** One row of a message: its position, id, op and values in the row schema's order (times as
   * epoch microseconds). */
  static final class RowChange {
    final int rowPos;
    final String rowId;
    final String op;
    final Object[] values;

    RowChange(int rowPos, String rowId, String op, Object[] values) {
      this.rowPos = rowPos;
      this.rowId = rowId;
      this.op = op;
      this.values = values;
    }
  }

  final int partition;
  final long offset;
  final Long seq;
  final String type;
  final Long eventUs;
  final Long kafkaUs;
  /** Why the record is malformed (its first bad row's reason), null when it is not. */
  String bad;
  /** The raw Kafka value (quarantine mode only). */
  String value;
  final List<RowChange> rows = new ArrayList<>();

  private Message(int partition, long offset, Long seq, String type, Long eventUs, Long kafkaUs) {
    this.partition = partition;
    this.offset = offset;
    this.seq = seq;
    this.type = type;
    this.eventUs = eventUs;
    this.kafkaUs = kafkaUs;
  }

  /** The seq as the rules compare it: a malformed record's null seq as 0. */
  long seqOrZero() {
    return seq == null ? 0L : seq;
  }

  boolean isBad() {
    return bad != null;
  }

  boolean is(String t) {
    return t.equals(type);
  }

  /** The group's rows as messages, in no particular order (``Continuity`` orders them): a vouched
   * message with its rows nested is one row ({@link NestedRows}), any other one row per message row. */
  static List<Message> gather(Iterator<Row> rows, Layout in, NestedRows nested) {
    Map<List<Long>, List<Row>> byRecord = new LinkedHashMap<>();
    List<Message> out = new ArrayList<>();
    while (rows.hasNext()) {
      Row r = rows.next();
      List<Row> whole = in.nestedRows(r);
      if (whole != null) {
        Message m = in.message(r);
        m.value = in.rawValue(r);
        m.bad = in.recordError(r);
        nested.read(whole, m, in.keyReason(r));
        out.add(m);
        continue;
      }
      byRecord.computeIfAbsent(List.of((long) r.getInt(in.partition), r.getLong(in.offset)),
                               k -> new ArrayList<>()).add(r);
    }
    Comparator<Row> byPos = Comparator.comparing(r -> r.isNullAt(in.rowPos) ? null : r.getInt(in.rowPos),
                                                 Comparator.nullsLast(Comparator.naturalOrder()));
    for (List<Row> own : byRecord.values()) {
      if (own.size() > 1) {
        own.sort(byPos);
      }
      Row head = own.get(0);
      Message m = in.message(head);
      m.value = in.rawValue(head);
      for (Row r : own) {
        if (m.bad == null) {
          m.bad = in.badReason(r);
        }
        if (!r.isNullAt(in.rowPos)) {
          m.rows.add(new RowChange(r.getInt(in.rowPos), r.getString(in.rowId), r.getString(in.op), in.values(r)));
        }
      }
      out.add(m);
    }
    return out;
  }

  static Message of(int partition, long offset, Long seq, String type, Long eventUs, Long kafkaUs) {
    return new Message(partition, offset, seq, type, eventUs, kafkaUs);
  }
}
