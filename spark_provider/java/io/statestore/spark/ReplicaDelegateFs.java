package io.statestore.spark;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.DelegateToFileSystem;

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
}
