"""The live source on Kafka: the partitions a projector process folds and their new records (`LiveSource`)."""
