package reconstructor.delta;

import java.io.ByteArrayOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Arrays;
import java.util.Iterator;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.delta.storage.S3SingleDriverLogStore;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FSDataOutputStreamBuilder;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta's log on S3 written put-if-absent: a commit file {@code _delta_log/N.json} is stored with
 * {@code If-None-Match: *}, so that of two drivers committing version N the second fails, with the
 * {@link FileAlreadyExistsException} Delta answers by checking for conflicts and retrying at N+1,
 * instead of silently replacing the first's commit.
 *
 * <p>Delta's own S3 store checks for the file and then writes it, which excludes only committers in
 * its own JVM: two drivers both pass the check and the later PUT wins. Here the store itself decides,
 * at the moment the object is stored (S3A's {@code fs.option.create.conditional.overwrite}).
 *
 * <p>A write whose answer was lost and whose retry then found the object is told apart from another
 * driver's commit by reading the object back: the same bytes are this write's own.
 *
 * <p>A commit that names the writer lease it was made under (the {@code lease} of the reconstructor's
 * batch record in its {@code commitInfo.userMetadata}) is stored only while that lease is still the
 * output's ({@code _reconstructor/writer.lease} beside the tables): a driver paused past its lease,
 * whose successor took the lease, fails its commit when it wakes instead of committing a batch the
 * successor wrote.  The lease is read just before the PUT, so what is left is a pause between the two.
 *
 * <p>Reads and listings are Delta's S3 store's. Set for {@code s3a://} with
 * {@code spark.delta.logStore.s3a.impl=reconstructor.delta.PutIfAbsentLogStore}.
 */
public final class PutIfAbsentLogStore extends S3SingleDriverLogStore {
  /** S3A's createFile() option (Hadoop 3.4.2 and later): create in close() only if absent. */
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";
  /** The writer lease's object under the output root (reconstructor/contract/lease.py's LEASE_NAME). */
  static final String LEASE_NAME = "_reconstructor/writer.lease";
  private static final ObjectMapper JSON = new ObjectMapper();

  public PutIfAbsentLogStore(Configuration initHadoopConf) {
    super(initHadoopConf);
  }

  @Override
  public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
      throws IOException {
    FileSystem fs = path.getFileSystem(hadoopConf);
    byte[] content = joined(actions);
    if (overwrite) {
      try (FSDataOutputStream out = fs.create(path, true)) {
        out.write(content);
      }
      return;
    }
    String lease = leaseOf(content);
    if (lease != null) {
      requireLease(fs, path, lease);
    }
    if (!fs.hasPathCapability(path, CONDITIONAL_CREATE)) {
      throw new IOException("cannot write " + path + " only if it is absent: its file system does not offer "
          + CONDITIONAL_CREATE + " (Hadoop 3.4.2 or later, fs.s3a.create.conditional.enabled=true)");
    }
    try {
      FSDataOutputStream out = createIfAbsent(fs, path);
      try {
        out.write(content);
      } finally {
        out.close();  // the PUT, conditional on no object at the path
      }
    } catch (IOException failed) {
      byte[] there = stored(fs, path);
      if (there == null) {
        throw failed;
      }
      if (Arrays.equals(there, content)) {
        return;  // this write's own object: its answer was lost and a retry found it
      }
      FileAlreadyExistsException taken = new FileAlreadyExistsException(path.toString());
      taken.initCause(failed);
      throw taken;
    }
  }

  /** A stream whose close() stores {@code path} only if no object is there (S3A checks nothing before). */
  @SuppressWarnings("unchecked")  // FileSystem.createFile returns the builder as a raw type
  private static FSDataOutputStream createIfAbsent(FileSystem fs, Path path) throws IOException {
    FSDataOutputStreamBuilder<FSDataOutputStream, ?> create = fs.createFile(path);
    create.overwrite(true);
    create.must(CONDITIONAL_CREATE, true);
    return create.build();
  }

  /**
   * The writer lease token a commit was made under: the {@code lease} in the reconstructor's batch
   * record ({@code {"reconstructor": {..., "lease": token}}}) in its {@code commitInfo.userMetadata};
   * null for a commit that names none (a compaction, a table's creation, a writer with no lease).
   */
  static String leaseOf(byte[] content) {
    for (String line : new String(content, StandardCharsets.UTF_8).split("\n")) {
      if (!line.startsWith("{\"commitInfo\"")) {
        continue;
      }
      try {
        JsonNode metadata = JSON.readTree(line).path("commitInfo").path("userMetadata");
        if (!metadata.isTextual()) {
          return null;
        }
        JsonNode lease = JSON.readTree(metadata.asText()).path("reconstructor").path("lease");
        return lease.isTextual() ? lease.asText() : null;
      } catch (IOException notJson) {
        return null;  // userMetadata another writer set: not a reconstructor batch's
      }
    }
    return null;
  }

  /** Refuse the commit at {@code path} unless the output's writer lease still has {@code token}. */
  private static void requireLease(FileSystem fs, Path path, String token) throws IOException {
    Path output = path.getParent().getParent().getParent();  // <output>/<table>/_delta_log/<version>.json
    Path lease = new Path(output, LEASE_NAME);
    byte[] stored = stored(fs, lease);
    String holder = null;
    if (stored != null) {
      try {
        JsonNode current = JSON.readTree(stored).path("token");
        holder = current.isTextual() ? current.asText() : null;
      } catch (IOException unreadable) {
        holder = null;
      }
    }
    if (!token.equals(holder)) {
      throw new IOException("refused to commit " + path + ": it was written under the writer lease " + token
          + ", and the lease at " + lease + " is " + (stored == null ? "gone" : "now " + holder)
          + " (a driver paused past its lease does not commit once another took it)");
    }
  }

  /** The actions as Delta's stores write them: each followed by a newline. */
  static byte[] joined(Iterator<String> actions) {
    StringBuilder text = new StringBuilder();
    while (actions.hasNext()) {
      text.append(actions.next()).append('\n');
    }
    return text.toString().getBytes(StandardCharsets.UTF_8);
  }

  /** The object at {@code path}, or null when there is none. */
  private static byte[] stored(FileSystem fs, Path path) throws IOException {
    try (InputStream in = fs.open(path)) {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      in.transferTo(bytes);
      return bytes.toByteArray();
    } catch (FileNotFoundException absent) {
      return null;
    }
  }
}
