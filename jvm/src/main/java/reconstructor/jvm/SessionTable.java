package reconstructor.jvm;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A session's table: its rows by {@code row_id} in the order the Python engine keeps them (a row
 * moves to the end when it is written), and the blob the state store keeps it as.
 *
 * <p>The blob ({@code RJT1}) carries its own column names and types, so a checkpoint written under
 * an older row schema loads after a nullable column is added (it reads as null) or one is
 * dropped; and the session's chain head, as the Python engine's Arrow blob does.
 * {@code reconstructor.core.jvm_blob} reads it for the {@code state} command.
 */
final class SessionTable implements java.io.Serializable {
  private static final byte[] MAGIC = "RJT1".getBytes(StandardCharsets.US_ASCII);
  private static final String TYPES = "sdlbt";  // string, double, long, boolean, timestamp

  final LinkedHashMap<String, Object[]> rows;

  SessionTable() {
    this(new LinkedHashMap<>());
  }

  private SessionTable(LinkedHashMap<String, Object[]> rows) {
    this.rows = rows;
  }

  int size() {
    return rows.size();
  }

  /** A table of its own with the same rows (a seed's, which every session it starts copies). */
  SessionTable copy() {
    LinkedHashMap<String, Object[]> copied = new LinkedHashMap<>(Math.max(16, rows.size() * 4 / 3 + 1));
    for (java.util.Map.Entry<String, Object[]> row : rows.entrySet()) {
      copied.put(row.getKey(), row.getValue().clone());
    }
    return new SessionTable(copied);
  }

  void put(String id, Object[] values) {
    rows.remove(id);
    rows.put(id, values);
  }

  // ---------------------------------------------------------------------------------------------
  // The blob

  static byte[] dump(SessionTable table, String[] names, String[] types, String head) {
    try {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream(64 + table.size() * 16 * (names.length + 1));
      DataOutputStream out = new DataOutputStream(bytes);
      out.write(MAGIC);
      writeString(out, head);
      out.writeInt(names.length);
      for (int i = 0; i < names.length; i++) {
        writeString(out, names[i]);
        out.writeByte(code(types[i]));
      }
      out.writeInt(table.size());
      for (Map.Entry<String, Object[]> row : table.rows.entrySet()) {
        writeString(out, row.getKey());
        Object[] v = row.getValue();
        for (int i = 0; i < names.length; i++) {
          writeValue(out, code(types[i]), v[i]);
        }
      }
      out.flush();
      return bytes.toByteArray();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The chain head a blob carries (null: none). */
  static String head(byte[] blob) {
    if (blob == null) {
      return null;
    }
    try {
      DataInputStream in = open(blob);
      return readString(in);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The table a blob holds, brought to the row schema {@code names}/{@code types}: a column it
   * lacks reads as null, one the schema no longer has is dropped, a changed type is refused. */
  static SessionTable load(byte[] blob, String[] names, String[] types, String schemaName) {
    try {
      DataInputStream in = open(blob);
      readString(in);
      int stored = in.readInt();
      char[] storedTypes = new char[stored];
      int[] target = new int[stored];
      List<String> wanted = List.of(names);
      for (int i = 0; i < stored; i++) {
        String name = readString(in);
        storedTypes[i] = (char) in.readByte();
        target[i] = wanted.indexOf(name);
        if (target[i] >= 0 && storedTypes[i] != code(types[target[i]])) {
          throw new IllegalStateException("state column '" + name + "' is " + typeName(storedTypes[i])
              + " in the checkpoint and " + types[target[i]] + " in row schema '" + schemaName + "'");
        }
      }
      int n = in.readInt();
      LinkedHashMap<String, Object[]> rows = new LinkedHashMap<>(Math.max(16, n * 4 / 3 + 1));
      for (int r = 0; r < n; r++) {
        String id = readString(in);
        Object[] v = new Object[names.length];
        for (int i = 0; i < stored; i++) {
          Object x = readValue(in, storedTypes[i]);
          if (target[i] >= 0) {
            v[target[i]] = x;
          }
        }
        rows.put(id, v);
      }
      return new SessionTable(rows);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static DataInputStream open(byte[] blob) throws IOException {
    DataInputStream in = new DataInputStream(new ByteArrayInputStream(blob));
    byte[] magic = new byte[4];
    in.readFully(magic);
    if (!java.util.Arrays.equals(magic, MAGIC)) {
      throw new IllegalStateException("the state holds a session table this engine did not write "
          + "(a checkpoint of the python engine?)");
    }
    return in;
  }

  private static char code(String type) {
    switch (type) {
      case "string": return 's';
      case "double": return 'd';
      case "long": return 'l';
      case "boolean": return 'b';
      case "timestamp": return 't';
      default: throw new IllegalArgumentException("no such column type: " + type);
    }
  }

  private static String typeName(char code) {
    return new String[] {"string", "double", "long", "boolean", "timestamp"}[TYPES.indexOf(code)];
  }

  private static void writeString(DataOutputStream out, String s) throws IOException {
    if (s == null) {
      out.writeInt(-1);
      return;
    }
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    out.writeInt(b.length);
    out.write(b);
  }

  private static String readString(DataInputStream in) throws IOException {
    int n = in.readInt();
    if (n < 0) {
      return null;
    }
    byte[] b = new byte[n];
    in.readFully(b);
    return new String(b, StandardCharsets.UTF_8);
  }

  private static void writeValue(DataOutputStream out, char type, Object v) throws IOException {
    if (v == null) {
      out.writeByte(0);
      return;
    }
    out.writeByte(1);
    switch (type) {
      case 's': writeString(out, (String) v); break;
      case 'd': out.writeDouble((Double) v); break;
      case 'b': out.writeBoolean((Boolean) v); break;
      default: out.writeLong((Long) v);  // long, timestamp (epoch microseconds)
    }
  }

  private static Object readValue(DataInputStream in, char type) throws IOException {
    if (in.readByte() == 0) {
      return null;
    }
    switch (type) {
      case 's': return readString(in);
      case 'd': return in.readDouble();
      case 'b': return in.readBoolean();
      default: return in.readLong();
    }
  }

  // ---------------------------------------------------------------------------------------------
  // The drift check

  /** How many differing row ids a drift's detail names, per kind of difference. */
  private static final int NAMED_ROWS = 5;

  /** What differs between this table and a snapshot's rows, as the Python engine words it; null
   * when they are the same table (two nulls are equal, a double's NaN is a null). */
  String driftFrom(List<Message.RowChange> snapshot) {
    Map<String, Object[]> incoming = new LinkedHashMap<>();
    for (Message.RowChange c : snapshot) {
      incoming.put(c.rowId, c.values);
    }
    List<String> missing = new ArrayList<>(), extra = new ArrayList<>(), changed = new ArrayList<>();
    for (Map.Entry<String, Object[]> row : rows.entrySet()) {
      Object[] other = incoming.get(row.getKey());
      if (other == null && !incoming.containsKey(row.getKey())) {
        missing.add(row.getKey());
      } else if (!sameRow(row.getValue(), other)) {
        changed.add(row.getKey());
      }
    }
    for (String id : incoming.keySet()) {
      if (!rows.containsKey(id)) {
        extra.add(id);
      }
    }
    if (missing.isEmpty() && extra.isEmpty() && changed.isEmpty()) {
      return null;
    }
    return "snapshot differs from the table rebuilt from the updates: " + named(missing.size() + " missing", missing)
        + ", " + named(extra.size() + " extra", extra) + ", " + named(changed.size() + " changed", changed);
  }

  private static boolean sameRow(Object[] a, Object[] b) {
    for (int i = 0; i < a.length; i++) {
      if (!sameValue(a[i], b[i])) {
        return false;
      }
    }
    return true;
  }

  static boolean isNull(Object v) {
    return v == null || (v instanceof Double && ((Double) v).isNaN());
  }

  private static boolean sameValue(Object a, Object b) {
    if (isNull(a) || isNull(b)) {
      return isNull(a) && isNull(b);
    }
    if (a instanceof Double && b instanceof Double) {
      return ((Double) a).doubleValue() == ((Double) b).doubleValue();  // -0.0 equals 0.0, as in pandas
    }
    return a.equals(b);
  }

  private static String named(String what, List<String> ids) {
    if (ids.isEmpty()) {
      return what;
    }
    ids.sort(Text.CODE_POINTS);
    StringBuilder out = new StringBuilder(what).append(" (");
    for (int i = 0; i < Math.min(NAMED_ROWS, ids.size()); i++) {
      out.append(i > 0 ? ", " : "").append(Text.pyRepr(ids.get(i)));
    }
    return out.append(ids.size() > NAMED_ROWS ? ", ...)" : ")").toString();
  }
}
