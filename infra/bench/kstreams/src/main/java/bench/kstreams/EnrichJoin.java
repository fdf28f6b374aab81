package bench.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.ContextualFixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.ContextualProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The ratings x customers LEFT JOIN that the enrichment job does, as a Kafka Streams application:
 * the benchmarks' reference. The customer table is a global store fed from the Debezium topic (row
 * id to the customer's latest columns, a delete removes it), read to the topic's end before the
 * first rating is joined. Each rating gets the customer as the store holds it when the rating is
 * processed (processing time; the job's join is as of the rating's time). Records in and out are
 * the project's JSON; unreadable ratings are counted and dropped (the job dead-letters them).
 *
 * <p>Arguments, key=value: bootstrap, ratings, cdc, enriched, alerts, app (application.id),
 * commitMs (500), threads (1), stateDir. It prints "state RUNNING" once the store is loaded and
 * closes (committing) on SIGTERM.
 */
public final class EnrichJoin {
  private static final Logger LOG = LoggerFactory.getLogger(EnrichJoin.class);
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
  static final String STORE = "customers";
  static final List<String> CUSTOMER_COLUMNS =
      List.of(
          "first_name", "last_name", "email", "gender", "club_status", "region", "comments",
          "create_ts", "update_ts");
  static final List<String> RATING_FIELDS =
      List.of("rating_id", "user_id", "stars", "route_id", "rating_time", "channel", "message");

  private EnrichJoin() {}

  /** The customer store's value for a Debezium change event's after image. */
  static byte[] customerEntry(JsonNode after, JsonNode source) throws IOException {
    ObjectNode entry = NODES.objectNode();
    for (String column : CUSTOMER_COLUMNS) {
      JsonNode value = after.get(column);
      entry.set(column, value == null ? NODES.nullNode() : value);
    }
    JsonNode file = source.get("file");
    String version =
        file != null && !file.isNull()
            ? file.asText() + ":" + source.path("pos").asText("null") + ":" + source.path("row").asText("null")
            : "lsn:" + source.path("lsn").asText("null");
    entry.put("customer_version", version);
    entry.set("customer_valid_from", source.path("ts_ms"));
    return JSON.writeValueAsBytes(entry);
  }

  /** Feeds the global store from the Debezium topic: customer rows only, by row id. */
  static final class CustomerTable extends ContextualProcessor<byte[], byte[], Void, Void> {
    private KeyValueStore<Integer, byte[]> store;

    @Override
    public void init(ProcessorContext<Void, Void> context) {
      super.init(context);
      store = context.getStateStore(STORE);
    }

    @Override
    public void process(Record<byte[], byte[]> record) {
      if (record.value() == null) {
        return; // Debezium's tombstone after a delete
      }
      try {
        JsonNode event = JSON.readTree(record.value());
        JsonNode source = event.path("source");
        if (!"customers".equals(source.path("table").asText())) {
          return; // the heartbeat table shares the topic
        }
        String op = event.path("op").asText();
        if ("d".equals(op)) {
          store.delete(event.path("before").path("id").asInt());
        } else {
          JsonNode after = event.path("after");
          store.put(after.path("id").asInt(), customerEntry(after, source));
        }
      } catch (IOException | RuntimeException e) {
        LOG.warn("unreadable change event skipped: {}", e.toString());
      }
    }
  }

  /** An enriched record's JSON, and whether it is an alert (decided as it is made). */
  record Enriched(byte[] json, boolean alert) {}

  /** Joins each rating to the store's customer: the enriched record, keyed by user_id. */
  static final class Enrich extends ContextualFixedKeyProcessor<byte[], byte[], Enriched> {
    private KeyValueStore<Integer, byte[]> store;
    private long unreadable;

    @Override
    public void init(FixedKeyProcessorContext<byte[], Enriched> context) {
      super.init(context);
      store = context.getStateStore(STORE);
    }

    @Override
    public void process(FixedKeyRecord<byte[], byte[]> record) {
      ObjectNode out = NODES.objectNode();
      try {
        JsonNode rating = JSON.readTree(record.value());
        if (!rating.isObject() || !rating.path("user_id").canConvertToInt()) {
          throw new IOException("no user_id");
        }
        for (String field : RATING_FIELDS) {
          JsonNode value = rating.get(field);
          out.set(field, value == null ? NODES.nullNode() : value);
        }
        byte[] found = store.get(rating.get("user_id").asInt());
        JsonNode customer = found == null ? null : JSON.readTree(found);
        for (String column : CUSTOMER_COLUMNS) {
          out.set(column, customer == null ? NODES.nullNode() : customer.get(column));
        }
        out.set("full_name", customer == null ? NODES.nullNode() : NODES.textNode(fullName(customer)));
        out.put("customer_matched", customer != null);
        out.set("customer_version", customer == null ? NODES.nullNode() : customer.get("customer_version"));
        out.set("customer_valid_from", customer == null ? NODES.nullNode() : customer.get("customer_valid_from"));
        out.put("rating_kafka_ts", Instant.ofEpochMilli(record.timestamp()).toString());
        RecordMetadata meta = context().recordMetadata().orElseThrow();
        out.put("rating_partition", meta.partition());
        out.put("rating_offset", meta.offset());
        out.putNull("cdc_watermark_ms");
        out.put("enriched_ms", System.currentTimeMillis());
        boolean alert =
            rating.path("stars").asInt(5) < 3
                && customer != null
                && "platinum".equals(customer.path("club_status").asText());
        context().forward(record.withValue(new Enriched(JSON.writeValueAsBytes(out), alert)));
      } catch (IOException | RuntimeException e) {
        if (++unreadable % 1000 == 1) {
          LOG.warn("unreadable rating dropped ({} so far): {}", unreadable, e.toString());
        }
      }
    }

    private static String fullName(JsonNode customer) {
      JsonNode first = customer.get("first_name");
      JsonNode last = customer.get("last_name");
      boolean hasFirst = first != null && !first.isNull();
      boolean hasLast = last != null && !last.isNull();
      if (hasFirst && hasLast) {
        return first.asText() + " " + last.asText();
      }
      return hasFirst ? first.asText() : hasLast ? last.asText() : "";
    }
  }

  static Topology topology(Map<String, String> args) {
    StreamsBuilder builder = new StreamsBuilder();
    builder.addGlobalStore(
        Stores.keyValueStoreBuilder(Stores.inMemoryKeyValueStore(STORE), Serdes.Integer(), Serdes.ByteArray())
            .withLoggingDisabled(),
        args.get("cdc"),
        Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()),
        CustomerTable::new);
    KStream<byte[], Enriched> enriched =
        builder.stream(args.get("ratings"), Consumed.with(Serdes.ByteArray(), Serdes.ByteArray()))
            .processValues(Enrich::new);
    Produced<byte[], byte[]> bytes = Produced.with(Serdes.ByteArray(), Serdes.ByteArray());
    enriched.mapValues(Enriched::json).to(args.get("enriched"), bytes);
    enriched.filter((key, value) -> value.alert()).mapValues(Enriched::json).to(args.get("alerts"), bytes);
    return builder.build();
  }

  static Map<String, String> parse(String[] argv) {
    Map<String, String> args = new LinkedHashMap<>(Map.of("commitMs", "500", "threads", "1"));
    for (String arg : argv) {
      int eq = arg.indexOf('=');
      if (eq < 1) {
        throw new IllegalArgumentException("expected key=value, got " + arg);
      }
      args.put(arg.substring(0, eq), arg.substring(eq + 1));
    }
    for (String required : List.of("bootstrap", "ratings", "cdc", "enriched", "alerts", "app", "stateDir")) {
      if (!args.containsKey(required)) {
        throw new IllegalArgumentException("missing argument " + required + "=...");
      }
    }
    return args;
  }

  public static void main(String[] argv) throws InterruptedException {
    Map<String, String> args;
    try {
      args = parse(argv);
    } catch (IllegalArgumentException e) {
      System.err.println(e.getMessage());
      System.err.println(
          "usage: EnrichJoin bootstrap=H:P ratings=T cdc=T enriched=T alerts=T app=ID stateDir=DIR"
              + " [commitMs=500] [threads=1]");
      System.exit(2);
      return;
    }
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("app"));
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, args.get("commitMs"));
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, args.get("threads"));
    props.put(StreamsConfig.STATE_DIR_CONFIG, args.get("stateDir"));
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    KafkaStreams streams = new KafkaStreams(topology(args), props);
    CountDownLatch closed = new CountDownLatch(1);
    streams.setStateListener(
        (now, before) -> {
          System.out.println("state " + now);
          System.out.flush();
        });
    Runtime.getRuntime()
        .addShutdownHook(
            new Thread(
                () -> {
                  streams.close();
                  closed.countDown();
                }));
    streams.start();
    closed.await();
  }
}
