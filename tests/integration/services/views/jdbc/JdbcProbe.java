import java.io.IOException;
import java.io.StringWriter;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.LinkedHashMap;
import java.util.Map;
import org.postgresql.PGConnection;

/**
 * What a JDBC tool (DataGrip, DBeaver, Metabase, a report writer) asks a database it browses,
 * asked of the views' wire protocol through the real PostgreSQL driver. Prints one line a row,
 * tab-separated: the call's name, then the row's values ("null" for SQL NULL); "END" after a
 * call's rows, or "ERROR", the SQLSTATE and the message when it fails.
 *
 * Usage: java -cp postgresql.jar JdbcProbe.java jdbc:postgresql://127.0.0.1:PORT/views?user=app VIEW KEY
 */
public class JdbcProbe {
    interface Call {
        ResultSet run(DatabaseMetaData meta) throws SQLException;
    }

    static void print(String name, ResultSet rows) throws SQLException {
        int columns = rows.getMetaData().getColumnCount();
        while (rows.next()) {
            StringBuilder line = new StringBuilder(name);
            for (int i = 1; i <= columns; i++) {
                line.append('\t').append(rows.getString(i));
            }
            System.out.println(line);
        }
        System.out.println(name + "\tEND");
    }

    static void error(String name, SQLException e) {
        System.out.println(name + "\tERROR\t" + e.getSQLState() + "\t" + String.valueOf(e.getMessage()).replace('\n', ' '));
    }

    public static void main(String[] args) throws Exception {
        String view = args[1];
        int key = Integer.parseInt(args[2]);
        try (Connection connection = DriverManager.getConnection(args[0])) {
            DatabaseMetaData meta = connection.getMetaData();
            System.out.println("product\t" + meta.getDatabaseProductName() + "\t" + meta.getDatabaseProductVersion());
            Map<String, Call> calls = new LinkedHashMap<>();
            calls.put("catalogs", m -> m.getCatalogs());
            calls.put("schemas", m -> m.getSchemas());
            calls.put("tables", m -> m.getTables(null, null, "%", null));
            calls.put("views", m -> m.getTables(null, "public", "%", new String[] {"VIEW"}));
            calls.put("columns", m -> m.getColumns(null, "public", view, "%"));
            calls.put("primaryKeys", m -> m.getPrimaryKeys(null, "public", view));
            calls.put("bestRowIdentifier", m -> m.getBestRowIdentifier(null, "public", view, DatabaseMetaData.bestRowSession, true));
            calls.put("typeInfo", m -> m.getTypeInfo());
            calls.put("tablePrivileges", m -> m.getTablePrivileges(null, "public", "%"));
            calls.put("columnPrivileges", m -> m.getColumnPrivileges(null, "public", view, "%"));
            calls.put("versionColumns", m -> m.getVersionColumns(null, "public", view));
            calls.put("indexInfo", m -> m.getIndexInfo(null, "public", view, false, true));
            calls.put("importedKeys", m -> m.getImportedKeys(null, "public", view));
            calls.put("exportedKeys", m -> m.getExportedKeys(null, "public", view));
            calls.put("functions", m -> m.getFunctions(null, "public", "%"));
            calls.put("functionColumns", m -> m.getFunctionColumns(null, "public", "%", "%"));
            calls.put("procedures", m -> m.getProcedures(null, "public", "%"));
            calls.put("procedureColumns", m -> m.getProcedureColumns(null, "public", "%", "%"));
            calls.put("udts", m -> m.getUDTs(null, "public", "%", null));
            calls.put("clientInfoProperties", m -> m.getClientInfoProperties());
            for (Map.Entry<String, Call> call : calls.entrySet()) {
                try {
                    print(call.getKey(), call.getValue().run(meta));
                } catch (SQLException e) {
                    error(call.getKey(), e);
                }
            }
            // What DBeaver asks as it connects; the session's zone, which the driver sent from the JVM's
            try (Statement session = connection.createStatement()) {
                print("dbeaver", session.executeQuery("SELECT current_schema(), session_user"));
                print("timeZone", session.executeQuery("SHOW TimeZone"));
            } catch (SQLException e) {
                error("dbeaver", e);
            }
            // A pull as an application sends it: prepared, the key bound; past the driver's
            // prepareThreshold (5) it becomes a named server-side statement.
            try (PreparedStatement pull = connection.prepareStatement("SELECT * FROM " + view + " WHERE user_id = ?")) {
                for (int i = 0; i < 7; i++) {
                    pull.setInt(1, key);
                    print("pull" + i, pull.executeQuery());
                }
            }
            // The view's rows as a stream, through a cursor in a transaction (Materialize's way)
            connection.setAutoCommit(false);
            try (Statement follow = connection.createStatement()) {
                follow.execute("DECLARE c CURSOR FOR SUBSCRIBE " + view);
                print("subscribed", follow.executeQuery("FETCH ALL c WITH (timeout = '5s')"));
            } catch (SQLException e) {
                error("subscribed", e);
            }
            // A result read a few rows at a time, as a tool with a fetch size reads a large one
            // (outside autocommit the driver executes a portal with a row limit)
            try (Statement fetched = connection.createStatement()) {
                fetched.setFetchSize(3);
                print("fetched", fetched.executeQuery("SELECT user_id FROM " + view + " ORDER BY user_id"));
            } catch (SQLException e) {
                error("fetched", e);
            }
            connection.rollback();
            connection.setAutoCommit(true);
            // An export as the driver's CopyManager makes it: COPY (...) TO STDOUT, in CSV
            try {
                StringWriter out = new StringWriter();
                long count = connection.unwrap(PGConnection.class).getCopyAPI().copyOut(
                        "COPY (SELECT user_id, ratings FROM " + view + " WHERE user_id <= 3 ORDER BY 1)"
                                + " TO STDOUT WITH (FORMAT csv, HEADER)", out);
                for (String line : out.toString().split("\n")) {
                    System.out.println("copied\t" + line);
                }
                System.out.println("copiedCount\t" + count);
            } catch (SQLException | IOException e) {
                System.out.println("copied\tERROR\t" + e);
            }
            try (Statement write = connection.createStatement()) {
                write.executeUpdate("DELETE FROM " + view);
                System.out.println("write\tdone");
            } catch (SQLException e) {
                error("write", e);
            }
        }
    }
}
