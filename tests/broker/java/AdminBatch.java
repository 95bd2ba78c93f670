import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.List;

import org.apache.rocketmq.tools.command.MQAdminStartup;

/**
 * Runs many mqadmin commands in one JVM (RocketMQ's own MQAdminStartup.main0, as the mqadmin
 * launcher runs it): each line of the file is "name<TAB>arg<TAB>arg..."; for each the output
 * comes between "=== name" and "=== end" lines. One JVM instead of one per command.
 */
public class AdminBatch {
    public static void main(String[] args) throws Exception {
        List<String> lines = Files.readAllLines(Paths.get(args[0]), StandardCharsets.UTF_8);
        PrintStream real = System.out;
        System.setErr(real);
        for (String ln : lines) {
            if (ln.trim().isEmpty()) continue;
            String[] parts = ln.split("\t");
            String[] cmd = java.util.Arrays.copyOfRange(parts, 1, parts.length);
            real.println("=== " + parts[0]);
            real.flush();
            long t0 = System.currentTimeMillis();
            try {
                MQAdminStartup.main0(cmd, null);
            } catch (Throwable t) {
                t.printStackTrace(real);
            }
            real.println();
            real.println("=== end " + (System.currentTimeMillis() - t0) + " ms");
            real.flush();
        }
        System.exit(0);
    }
}
