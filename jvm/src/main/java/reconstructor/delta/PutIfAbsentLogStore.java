package reconstructor.delta;

import java.io.ByteArrayOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Arrays;
import java.util.Iterator;

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
 * <p>Reads and listings are Delta's S3 store's. Set for {@code s3a://} with
 * {@code spark.delta.logStore.s3a.impl=reconstructor.delta.PutIfAbsentLogStore}.
 */
public final class PutIfAbsentLogStore extends S3SingleDriverLogStore {
  /** S3A's createFile() option (Hadoop 3.4.2 and later): create in close() only if absent. */
  static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

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
