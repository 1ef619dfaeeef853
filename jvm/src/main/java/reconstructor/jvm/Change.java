package reconstructor.jvm;

/** One applied row change, stamped with its message's coordinates: a row of {@code row_changes}
 * (and, when it is a row's last of the batch, of {@code current_rows}). */
final class Change {
  final Message message;
  final int rowPos;
  final String rowId;
  final String op;
  final Object[] values;

  Change(Message message, int rowPos, String rowId, String op, Object[] values) {
    this.message = message;
    this.rowPos = rowPos;
    this.rowId = rowId;
    this.op = op;
    this.values = values;
  }
}
