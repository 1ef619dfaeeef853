package reconstructor.jvm;

import java.io.Serializable;
import java.time.DateTimeException;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.List;
import java.util.regex.Pattern;

import org.apache.spark.sql.Row;
import org.apache.spark.types.variant.Variant;
import org.apache.spark.types.variant.VariantBuilder;
import org.apache.spark.types.variant.VariantUtil;
import org.apache.spark.unsafe.types.VariantVal;

/**
 * A vouched message's rows, unexploded ({@code parse_records(nested_rows=True)}): each row as
 * {@code from_json} read it (id, op as a VARIANT, the values with times as their text), read into
 * the message and checked here as the parse stage checks an exploded one
 * ({@code reconstructor.spark.parse._vouched_row_error}), in its order and with its words.
 *
 * <p>The message's shape was vouched for, so only these checks are left: a row that is not an
 * object, an empty or missing id, an op other than upsert or delete, a delete with values, a time
 * that is no RFC 3339 date-time or lies outside the range, and a number past a double's range.
 * Times are parsed as {@code reconstructor.spark.timestamps.rfc3339_timestamp} parses them.
 */
final class NestedRows implements Serializable {
  private static final String UPSERT = "upsert", DELETE = "delete";

  private final String[] names;
  private final String[] types;
  private final Pattern rfc3339;
  private final long rangeUs;
  private final String rangeText;

  NestedRows(EngineSettings cfg) {
    names = cfg.names;
    types = cfg.types;
    rfc3339 = Pattern.compile("^(?:" + cfg.timestampPattern + ")\\z");
    rangeUs = cfg.timeRangeUs;
    rangeText = cfg.timeRangeText;
  }

  /**
   * Adds the rows to {@code m} and, where {@code m} is not malformed yet, gives it its reason as
   * the exploded rows would: row by row, each row's own error before the record's key error.
   */
  void read(List<Row> rows, Message m, String keyReason) {
    if (rows.isEmpty() && m.bad == null) {
      m.bad = keyReason;
    }
    for (int pos = 0; pos < rows.size(); pos++) {
      Row row = rows.get(pos);
      String op = row == null ? null : opText(row.get(1));
      Object[] values = new Object[names.length];
      String error = read(row, pos, op, values);
      if (m.bad == null) {
        m.bad = error != null ? error : keyReason;
      }
      if (row != null) {
        m.rows.add(new Message.RowChange(pos, row.getString(0), op == null ? UPSERT : op, values));
      }
    }
  }

  /** Reads a row's values (a time as epoch microseconds, null where it is no time or out of
   * range; an infinity as null) and returns its first error, null when it has none; {@code opText}
   * is its op's text ({@link #opText}). */
  private String read(Row row, int pos, String opText, Object[] values) {
    String prefix = "rows[" + pos + "]";
    if (row == null) {
      return prefix + " is not an object";
    }
    String error = null;
    String id = row.getString(0);
    if (id == null || id.isEmpty()) {
      error = prefix + ".id must be a non-empty string";
    } else if (!row.isNullAt(1) && !(UPSERT.equals(opText) || DELETE.equals(opText))) {
      error = prefix + ".op must be upsert or delete";
    } else if (DELETE.equals(opText) && !row.isNullAt(2)) {
      error = prefix + " is a delete and carries values";
    }
    Row given = row.isNullAt(2) ? null : row.getStruct(2);
    for (int i = 0; i < names.length; i++) {
      Object v = given == null ? null : given.get(i);
      if (v == null) {
        continue;
      }
      if ("timestamp".equals(types[i])) {
        String text = (String) v;
        Long us = micros(text);
        if (us == null) {
          if (error == null) {
            error = prefix + ".values." + names[i] + " expects timestamp, got STRING " + Text.codePoints(jsonText(text), 60);
          }
        } else if (us < -rangeUs || us > rangeUs) {
          if (error == null) {
            error = prefix + ".values." + names[i] + " " + Text.codePoints(text, 60)
                + " is outside the supported range " + rangeText;
          }
          us = null;
        }
        values[i] = us;
      } else if ("double".equals(types[i]) && Double.isInfinite((Double) v)) {
        if (error == null) {
          error = prefix + ".values." + names[i] + " expects double, got a number past its range";
        }
      } else {
        values[i] = v;
      }
    }
    return error;
  }

  /** The op's text (a vouched row's op is a JSON string when present), null when absent or no string. */
  private static String opText(Object op) {
    if (op == null) {
      return null;
    }
    VariantVal val = (VariantVal) op;
    Variant v = new Variant(val.getValue(), val.getMetadata());
    return v.getType() == VariantUtil.Type.STRING ? v.getString() : null;
  }

  /** A string as Spark's {@code to_json(CAST(s AS VARIANT))} writes it. */
  private static String jsonText(String s) {
    VariantBuilder b = new VariantBuilder(false);
    b.appendString(s);
    return b.result().toJson(ZoneOffset.UTC);
  }

  /**
   * Epoch microseconds of an RFC 3339 date-time, null when it is not one, as the parse stage's
   * SQL reads it: the grammar, an offset of at most 23:59, the local date-time (seconds 60 read as
   * 59, the fraction cut to microseconds) as a valid UTC date-time, then the leap second and the
   * offset applied.
   */
  Long micros(String t) {
    if (!rfc3339.matcher(t).find()) {
      return null;
    }
    int n = t.length();
    boolean zulu = Character.toUpperCase(t.charAt(n - 1)) == 'Z';
    if (!zulu && (t.substring(n - 5, n - 3).compareTo("23") > 0 || t.substring(n - 2).compareTo("59") > 0)) {
      return null;
    }
    boolean leap = t.startsWith("60", 17);
    int second = leap ? 59 : Integer.parseInt(t.substring(17, 19));
    int nanos = 0;
    if (n > 19 && t.charAt(19) == '.') {
      int end = 20;
      while (end < n && Character.isDigit(t.charAt(end))) {
        end++;
      }
      String digits = t.substring(20, Math.min(end, 26));
      nanos = Integer.parseInt((digits + "000000").substring(0, 6)) * 1000;
    }
    long local;
    try {
      local = LocalDateTime.of(Integer.parseInt(t.substring(0, 4)), Integer.parseInt(t.substring(5, 7)),
                               Integer.parseInt(t.substring(8, 10)), Integer.parseInt(t.substring(11, 13)),
                               Integer.parseInt(t.substring(14, 16)), second, nanos)
          .toEpochSecond(ZoneOffset.UTC) * 1_000_000L + nanos / 1000;
    } catch (DateTimeException e) {
      return null;
    }
    long offsetUs = 0;
    if (!zulu) {
      int sign = t.charAt(n - 6) == '+' ? 1 : -1;
      offsetUs = sign * (Long.parseLong(t.substring(n - 5, n - 3)) * 3600 + Long.parseLong(t.substring(n - 2)) * 60)
          * 1_000_000L;
    }
    return local + (leap ? 1_000_000L : 0L) - offsetUs;
  }
}
