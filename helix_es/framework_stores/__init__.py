"""The LangGraph checkpoint log and store items on the event log: what the framework adapters read and write."""
