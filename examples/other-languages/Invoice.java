// pgfence from Java (JDBC, pgjdbc), through its SQL interface: a lease and a write fenced by its
// token, then a fenced session lock on the same name and a write fenced by its (higher) token, then a
// write with the lease's token, now stale, which the guard refuses.
//
//   DATABASE_URL=postgres://user@host/db java -cp /usr/share/java/postgresql.jar examples/other-languages/Invoice.java
//   (JDK 11 or later runs the source file; with DATABASE_URL unset, it reads PGHOST, PGPORT, PGUSER,
//   PGDATABASE, PGPASSWORD: JDBC reads neither by itself)
//
// Needs pgfence's schema (`pgfence migrate`). Exits 1 on any failure.

import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

public class Invoice {
  static final String NAME = "invoice:42";
  // The guarded write: 0 rows means a newer holder (a higher token) has written the row.
  static final String GUARDED_WRITE = "UPDATE example_invoices SET status = ?, fencing_token = ?"
      + " WHERE id = 42 AND (fencing_token IS NULL OR fencing_token <= ?)";

  static final class Failure extends Exception {
    Failure(String message) {
      super(message);
    }
  }

  public static void main(String[] args) throws Exception {
    // One connection, in autocommit (JDBC's default): each call below commits at once, as the SQL
    // interface expects, and a session lock belongs to the connection that took it.
    try (Connection conn = connect()) {
      try (Statement st = conn.createStatement()) {
        st.execute("SET statement_timeout = '30s'"); // bounds every wait below
        st.execute("CREATE TABLE IF NOT EXISTS example_invoices (id int PRIMARY KEY, status text, fencing_token bigint)");
        st.execute("INSERT INTO example_invoices (id, status) VALUES (42, 'open') ON CONFLICT (id) DO NOTHING");
      }
      long key = (Long) one(conn, "SELECT pgfence.lock_key(?)", NAME);
      System.out.println("key of " + NAME + ": " + key);
      long leaseToken = withLease(conn, key);
      withSessionLock(conn, key, leaseToken);
    } catch (Failure f) {
      System.err.println(f.getMessage());
      System.exit(1);
    }
  }

  // 1. A lease: waits up to 10 s, held for at most 30 s unless renewed (renew_lease). Returns its token.
  static long withLease(Connection conn, long key) throws SQLException, Failure {
    Long token = (Long) one(conn, "SELECT pgfence.lease(p_key => ?, p_ttl_ms => 30000, p_timeout_ms => 10000,"
        + " p_owner => 'Invoice.java', p_name => ?)", key, NAME);
    if (token == null) throw new Failure("lease: not granted within 10 s");
    System.out.println("lease: token " + token);
    boolean released;
    try {
      if (!fencedWrite(conn, token, "paid")) throw new Failure("lease: fenced write refused: a newer holder wrote invoice 42");
      System.out.println("lease: fenced write applied (invoice 42 paid)");
    } finally {
      released = (Boolean) one(conn, "SELECT pgfence.release_lease(?, ?)", key, token);
    }
    if (!released) throw new Failure("lease: lost before its release (expired or taken over)");
    System.out.println("lease: released");
    return token;
  }

  // 2. A fenced session lock of this connection: held from here until unlock. 3. A write with the
  // lease's token, as a holder that paused past its lease would make it: refused.
  static void withSessionLock(Connection conn, long key, long staleToken) throws SQLException, Failure {
    long token = (Long) one(conn, "SELECT pgfence.lock_fenced(?)", key);
    System.out.println("session lock: token " + token);
    boolean unlocked;
    try {
      if (!fencedWrite(conn, token, "shipped")) throw new Failure("session lock: fenced write refused: a newer holder wrote invoice 42");
      System.out.println("session lock: fenced write applied (invoice 42 shipped)");
      if (fencedWrite(conn, staleToken, "cancelled")) throw new Failure("stale token " + staleToken + ": write applied");
      Object holds = one(conn, "SELECT fencing_token FROM example_invoices WHERE id = 42");
      System.out.println("stale token " + staleToken + ": write refused (invoice 42 holds token " + holds + ")");
    } finally {
      unlocked = (Boolean) one(conn, "SELECT pgfence.unlock(?)", key);
    }
    if (!unlocked) throw new Failure("session lock: not held at unlock");
    System.out.println("session lock: released");
  }

  static boolean fencedWrite(Connection conn, long token, String status) throws SQLException {
    try (PreparedStatement ps = conn.prepareStatement(GUARDED_WRITE)) {
      ps.setString(1, status);
      ps.setLong(2, token);
      ps.setLong(3, token);
      return ps.executeUpdate() == 1;
    }
  }

  /** The first column of the one row a query returns (null for SQL NULL). */
  static Object one(Connection conn, String sql, Object... params) throws SQLException {
    try (PreparedStatement ps = conn.prepareStatement(sql)) {
      for (int i = 0; i < params.length; i++) ps.setObject(i + 1, params[i]);
      try (ResultSet rs = ps.executeQuery()) {
        rs.next();
        return rs.getObject(1);
      }
    }
  }

  /** DATABASE_URL (postgres://user:password@host:port/database?params), else the PG* variables. */
  static Connection connect() throws Exception {
    Properties props = new Properties();
    String url = System.getenv("DATABASE_URL");
    String jdbc;
    if (url != null && !url.isEmpty()) {
      URI u = new URI(url);
      if (u.getRawUserInfo() != null) {
        String[] userInfo = u.getRawUserInfo().split(":", 2);
        props.setProperty("user", URLDecoder.decode(userInfo[0], StandardCharsets.UTF_8));
        if (userInfo.length > 1) props.setProperty("password", URLDecoder.decode(userInfo[1], StandardCharsets.UTF_8));
      }
      jdbc = "jdbc:postgresql://" + u.getHost() + (u.getPort() > 0 ? ":" + u.getPort() : "") + u.getRawPath()
          + (u.getRawQuery() != null ? "?" + u.getRawQuery() : "");
    } else {
      String user = env("PGUSER", System.getProperty("user.name"));
      props.setProperty("user", user);
      if (System.getenv("PGPASSWORD") != null) props.setProperty("password", System.getenv("PGPASSWORD"));
      jdbc = "jdbc:postgresql://" + env("PGHOST", "localhost") + ":" + env("PGPORT", "5432") + "/" + env("PGDATABASE", user);
    }
    return DriverManager.getConnection(jdbc, props);
  }

  static String env(String name, String fallback) {
    String value = System.getenv(name);
    return value == null || value.isEmpty() ? fallback : value;
  }
}
