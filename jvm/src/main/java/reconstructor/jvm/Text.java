package reconstructor.jvm;

import java.math.BigDecimal;
import java.math.MathContext;
import java.math.RoundingMode;
import java.util.Comparator;
import java.util.Locale;

import com.fasterxml.jackson.core.io.NumberOutput;

/**
 * Text exactly as the Python engine writes it: a violation's detail quotes a row id in the shape
 * of Python's {@code repr} with the contract's escaping, the change log's digests hash RFC 8785
 * JSON, and row ids sort by code point. Two engines that differ in one character here write
 * different tables.
 */
final class Text {
  private Text() {}

  /** Strings in code point order (Python's and UTF-8's), not Java's UTF-16 order. */
  static final Comparator<String> CODE_POINTS = Text::compareCodePoints;

  static int compareCodePoints(String a, String b) {
    int i = 0, j = 0;
    while (i < a.length() && j < b.length()) {
      int x = a.codePointAt(i), y = b.codePointAt(j);
      if (x != y) {
        return Integer.compare(x, y);
      }
      i += Character.charCount(x);
      j += Character.charCount(y);
    }
    return Integer.compare(a.length() - i, b.length() - j);
  }

  /**
   * A text quoted as the Python engine quotes it ({@code reconstructor.core.violations.quoted}):
   * the shape of Python's {@code repr(str)} (single quotes unless the text holds one and no double
   * quote; the quote and the backslash escaped), escaping only the contract's fixed list of code
   * points ({@link #escaped}), never by a Unicode database: Java's tables and Python's differ in
   * version.
   */
  static String pyRepr(String s) {
    char quote = s.indexOf('\'') >= 0 && s.indexOf('"') < 0 ? '"' : '\'';
    StringBuilder out = new StringBuilder(s.length() + 2).append(quote);
    for (int i = 0; i < s.length(); ) {
      int c = s.codePointAt(i);
      i += Character.charCount(c);
      if (c == quote || c == '\\') {
        out.append('\\').appendCodePoint(c);
      } else if (escaped(c)) {
        escape(out, c);
      } else {
        out.appendCodePoint(c);
      }
    }
    return out.append(quote).toString();
  }

  /** The code points a detail or a line escapes: the C0 and C1 controls, the two Unicode line
   * ends (U+2028, U+2029) and surrogates (a lone one, as {@code codePointAt} yields it). */
  static boolean escaped(int c) {
    return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0x2028 || c == 0x2029 || (c >= 0xd800 && c <= 0xdfff);
  }

  /** {@code c} as Python writes an escape: a backslash and {@code t}, {@code n} or {@code r}, else
   * {@code x}, {@code u} or {@code U} and two, four or eight lower-case hex digits by its size. */
  private static void escape(StringBuilder out, int c) {
    if (c == '\t') {
      out.append("\\t");
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\r') {
      out.append("\\r");
    } else if (c <= 0xff) {
      out.append(String.format(Locale.ROOT, "\\x%02x", c));
    } else if (c <= 0xffff) {
      out.append(String.format(Locale.ROOT, "\\u%04x", c));
    } else {
      out.append(String.format(Locale.ROOT, "\\U%08x", c));
    }
  }

  /** A JSON string as Python's {@code json.encoder.encode_basestring} writes it (RFC 8785's
   * escaping): quotes, backslashes and control characters escaped, every other letter as it is. */
  static void jsonString(StringBuilder out, String s) {
    out.append('"');
    int plain = 0;  // the text before the first character to escape goes in at once
    while (plain < s.length() && s.charAt(plain) >= 0x20 && s.charAt(plain) != '"' && s.charAt(plain) != '\\') {
      plain++;
    }
    if (plain == s.length()) {
      out.append(s).append('"');  // a bulk copy; append(s, 0, n) goes a character at a time
      return;
    }
    out.append(s, 0, plain);
    for (int i = plain; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"': out.append("\\\""); break;
        case '\\': out.append("\\\\"); break;
        case '\n': out.append("\\n"); break;
        case '\r': out.append("\\r"); break;
        case '\t': out.append("\\t"); break;
        case '\b': out.append("\\b"); break;
        case '\f': out.append("\\f"); break;
        default:
          if (c < 0x20) {
            out.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
          } else {
            out.append(c);
          }
      }
    }
    out.append('"');
  }

  /** The first {@code n} code points of {@code s}, as Spark's {@code substr(s, 1, n)} takes them. */
  static String codePoints(String s, int n) {
    return s.codePointCount(0, s.length()) <= n ? s : s.substring(0, s.offsetByCodePoints(0, n));
  }

  static String jsonString(String s) {
    StringBuilder out = new StringBuilder(s.length() + 2);
    jsonString(out, s);
    return out.toString();
  }

  /**
   * A finite double as RFC 8785 writes it (ECMAScript's Number.prototype.toString): the shortest
   * decimal that reads back as {@code x}, the closest of them to {@code x} (the even one of two),
   * in plain or exponent form by its magnitude.
   *
   * <p>Java 17's {@code Double.toString} reads back but is not always the shortest. Jackson's
   * Schubfach writer (in the jackson-core Spark ships) is: of the shortest decimals it picks the
   * closest, the even one of a tie, as ECMAScript does. It departs only where one digit would do,
   * because it then weighs the two-digit decimals too (JDK 19's rule: {@code 4.9E-324} where
   * ECMAScript writes {@code 5e-324}), so a two-digit result is checked against the one-digit
   * decimals either side of it.
   */
  static String jcsNumber(double x) {
    if (x == 0) {
      return "0";
    }
    double abs = Math.abs(x);
    String java = NumberOutput.toString(abs, true);  // "123.45", "1.0E-5", "1.2345E23"
    int e = java.indexOf('E');
    String mantissa = e < 0 ? java : java.substring(0, e);
    int dot = mantissa.indexOf('.');
    String all = mantissa.substring(0, dot) + mantissa.substring(dot + 1);
    int point = dot + (e < 0 ? 0 : Integer.parseInt(java.substring(e + 1)));
    int lead = 0;
    while (all.charAt(lead) == '0') {
      lead++;
    }
    int end = all.length();
    while (all.charAt(end - 1) == '0') {
      end--;
    }
    String digits = all.substring(lead, end);
    int n = point - lead;  // abs = 0.d1..dk * 10**n
    if (digits.length() == 2) {  // the two-digit decimal may have been picked over a one-digit one
      BigDecimal one = oneDigit(abs, digits.charAt(0) - '0', n);
      if (one != null) {
        digits = one.unscaledValue().toString();
        n = 1 - one.scale();
      }
    }
    return (x < 0 ? "-" : "") + ecmaScript(digits, n);
  }

  /** Of the one-digit decimals around {@code abs} (whose two-digit one is {@code 0.d? * 10**n}),
   * the one that reads back as {@code abs}, the closer of two (searched exactly, as they are rare);
   * or null if none reads back. */
  private static BigDecimal oneDigit(double abs, int d, int n) {
    BigDecimal below = BigDecimal.valueOf(d, 1 - n);
    BigDecimal above = BigDecimal.valueOf(d + 1, 1 - n).stripTrailingZeros();  // 10 * 10**(n-1) is 1 * 10**n
    boolean belowReads = below.doubleValue() == abs, aboveReads = above.doubleValue() == abs;
    if (belowReads && aboveReads) {
      return shortestNearest(abs, 1);
    }
    return belowReads ? below : aboveReads ? above : null;
  }

  /** {@code 0.digits * 10**n} as ECMAScript writes a number: plain from 1e-6 up to 1e21, else with
   * an exponent. */
  private static String ecmaScript(String digits, int n) {
    int k = digits.length();
    if (k <= n && n <= 21) {
      return digits + "0".repeat(n - k);
    } else if (0 < n && n <= 21) {
      return digits.substring(0, n) + "." + digits.substring(n);
    } else if (-6 < n && n <= 0) {
      return "0." + "0".repeat(-n) + digits;
    }
    int e = n - 1;
    return digits.charAt(0) + (k > 1 ? "." + digits.substring(1) : "") + "e" + (e >= 0 ? "+" : "-") + Math.abs(e);
  }

  /** The shortest decimal of at most {@code p} digits that reads back as {@code abs}, the closest
   * of them (the even one of a tie), found exactly: at each length the candidates are the decimals
   * just below and just above {@code abs}'s exact value (if any decimal of a length reads back, one
   * of those two does; a power of two's interval is lopsided, so the nearer may not), and so does
   * one a digit longer, so the search stops at the first length with none. */
  private static BigDecimal shortestNearest(double abs, int p) {
    BigDecimal exact = new BigDecimal(abs);
    BigDecimal best = closestReadingBack(exact, abs, p);
    while (p > 1) {
      BigDecimal shorter = closestReadingBack(exact, abs, p - 1);
      if (shorter == null) {
        break;
      }
      best = shorter;
      p--;
    }
    return best.stripTrailingZeros();
  }

  /** Of the decimals of {@code digits} significant digits just below and above {@code exact}, the
   * closer one that reads back as {@code abs} (the even one of a tie), or null if neither does. */
  private static BigDecimal closestReadingBack(BigDecimal exact, double abs, int digits) {
    BigDecimal below = exact.round(new MathContext(digits, RoundingMode.FLOOR));
    BigDecimal above = exact.round(new MathContext(digits, RoundingMode.CEILING));
    boolean belowReads = below.doubleValue() == abs, aboveReads = above.doubleValue() == abs;
    if (!belowReads || !aboveReads) {
      return belowReads ? below : aboveReads ? above : null;
    }
    int order = exact.subtract(below).compareTo(above.subtract(exact));
    if (order != 0) {
      return order < 0 ? below : above;
    }
    return below.unscaledValue().testBit(0) ? above : below;
  }
}
