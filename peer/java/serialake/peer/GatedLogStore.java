package serialake.peer;

import io.delta.storage.HDFSLogStore;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Iterator;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

/**
 * delta-spark's log store for local tables, with a gate before a commit: the test peer's way to
 * make delta-spark commit second from the version it read, whatever the operation.
 *
 * <p>{@link #arm} names a table and a gate directory. The next commit file that delta-spark
 * writes to that table (a new {@code <version>.json}, never overwritten) first creates
 * {@code <gate>/reached}, then waits for {@code <gate>/release}; by then delta-spark has pinned
 * its snapshot, written its data files and built its actions. When the caller has committed the
 * same version meanwhile, delta-spark's put fails as it would against any concurrent writer,
 * and delta-spark runs its own conflict check. Set with
 * {@code spark.delta.logStore.file.impl=serialake.peer.GatedLogStore}.
 */
public class GatedLogStore extends HDFSLogStore {
    private static final ConcurrentHashMap<String, String> GATES = new ConcurrentHashMap<>();

    public GatedLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    /** Gate the next commit to the table at {@code tablePath} (a local path) on {@code gateDir}. */
    public static void arm(String tablePath, String gateDir) {
        GATES.put(Paths.get(tablePath).toAbsolutePath().normalize().toString(), gateDir);
    }

    /** Remove a gate that was never reached (the operation committed nothing). */
    public static void disarm(String tablePath) {
        GATES.remove(Paths.get(tablePath).toAbsolutePath().normalize().toString());
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        if (!overwrite && path.getName().matches("\\d{20}\\.json") && path.getParent() != null
                && path.getParent().getParent() != null) {
            String table = Paths.get(path.getParent().getParent().toUri().getPath()).normalize().toString();
            String gate = GATES.remove(table);
            if (gate != null) {
                waitAtGate(gate);
            }
        }
        super.write(path, actions, overwrite, hadoopConf);
    }

    private static void waitAtGate(String gate) throws IOException {
        Files.createDirectories(Paths.get(gate));
        Files.write(Paths.get(gate, "reached"), new byte[0]);
        long deadline = System.nanoTime() + 300_000_000_000L;
        while (!Files.exists(Paths.get(gate, "release"))) {
            if (System.nanoTime() > deadline) {
                throw new IOException("gate " + gate + " was never released");
            }
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IOException("interrupted at gate " + gate, e);
            }
        }
    }
}
