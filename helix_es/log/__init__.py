"""The log: the EventLog port, the Avro codec, the embedded and Kafka logs, and the readers that replay them."""
