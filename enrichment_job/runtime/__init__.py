"""The Spark runtime both jobs stand on: the session (`session`), the driver JVM's class archive
(`jvm`), the one module that reaches Spark's private interfaces (`spark_internals`), the state
folder (`state_dir`), the settings they share (`settings`) and the entry points' command line
(`cli`)."""

__all__ = ["cli", "jvm", "session", "settings", "spark_internals", "state_dir"]
