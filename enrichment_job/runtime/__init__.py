"""The Spark runtime both jobs stand on: the session (`session`), the driver JVM's class archive
(`jvm`), the one module that reaches Spark's private interfaces (`spark_internals`), the state
folder (`state_dir`) and the queries' checkpoints and run in it (`checkpoints`), Kafka offsets
as JSON writes them (`offsets`), a micro-batch's DataFrames built with few calls into the JVM
(`plans`), progress and metrics (`metrics`), the settings both jobs share (`settings`), intervals
in the words of Spark's trigger (`intervals`) and the entry points' command line (`cli`)."""

__all__ = [
    "checkpoints",
    "cli",
    "intervals",
    "jvm",
    "metrics",
    "offsets",
    "plans",
    "session",
    "settings",
    "spark_internals",
    "state_dir",
]
