// A Java HTTP/1.0 file server on a plain java.net.ServerSocket with the default constructor
// (test_dualstack.py): the JDK opens a dual-stack AF_INET6 socket on [::]. One thread per
// connection. Run as a single-file program: java JavaHttp.java DIR PORT.
import java.io.*;
import java.net.*;
import java.nio.file.*;

public class JavaHttp {
    public static void main(String[] args) throws IOException {
        Path dir = Paths.get(args[0]);
        ServerSocket ls = new ServerSocket(Integer.parseInt(args[1]));
        System.out.println("listening " + ls.getLocalSocketAddress());
        System.out.flush();
        for (;;) {
            Socket c = ls.accept();
            new Thread(() -> serve(c, dir)).start();
        }
    }

    static void serve(Socket c, Path dir) {
        try (c) {
            BufferedReader in = new BufferedReader(new InputStreamReader(c.getInputStream()));
            String first = in.readLine();
            for (String l = first; l != null && !l.isEmpty(); l = in.readLine()) { }
            String name = first == null ? "" : first.split(" ")[1];
            Path f = dir.resolve(Paths.get(name).getFileName().toString());
            OutputStream out = new BufferedOutputStream(c.getOutputStream(), 65536);
            if (!Files.isRegularFile(f)) {
                out.write("HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n".getBytes());
            } else {
                out.write(("HTTP/1.0 200 OK\r\nContent-Length: " + Files.size(f) +
                           "\r\nX-Peer: " + c.getInetAddress().getHostAddress() + "\r\n\r\n").getBytes());
                Files.copy(f, out);
            }
            out.flush();
            c.shutdownOutput();
            while (c.getInputStream().read() >= 0) { }
        } catch (IOException e) {
            System.err.println("serve: " + e);
        }
    }
}
