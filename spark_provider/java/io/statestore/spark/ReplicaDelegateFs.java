package io.statestore.spark;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.Options;
import org.apache.hadoop.fs.Path;

/**
 * {@link ReplicaFilterFileSystem}'s FileContext half ({@code fs.AbstractFileSystem.<scheme>.impl}), through which
 * Spark's default checkpoint file manager writes and renames changelogs and snapshot zips: FileContext's calls
 * delegated to the layer over the scheme's own file system, so that both APIs keep and serve the same copies.
 */
public class ReplicaDelegateFs extends DelegateToFileSystem {
  public ReplicaDelegateFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    // As the object stores' own delegating classes (S3A, Abfs...): the authority is not required, so no default port.
    super(uri, ReplicaFilterFileSystem.over(uri, conf), conf, uri.getScheme(), false);
  }

  // Spark renames a changelog or zip over an existing one with OVERWRITE. DelegateToFileSystem leaves that to
  // AbstractFileSystem, which deletes the target and then renames (the file is missing in between); the wrapped
  // file system's own rename with OVERWRITE (HDFS's is atomic) is what the scheme would do without the layer.
  @SuppressWarnings("deprecation")
  @Override
  public void renameInternal(Path src, Path dst, boolean overwrite) throws IOException {
    if (!overwrite) {
      super.renameInternal(src, dst, false);
      return;
    }
    ((ReplicaFilterFileSystem) fsImpl).rename(src, dst, Options.Rename.OVERWRITE);
  }
}
