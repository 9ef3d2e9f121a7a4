"""Framework adapters over helix-es memories (extras `langchain`, `langgraph`, `openai-agents`).

Each module here imports its framework, and only when that module is imported: `import helix_es`
never needs one.

- `helix_es.integrations.langchain.HelixChatMessageHistory`: a LangChain chat message history.
- `helix_es.integrations.langgraph.HelixSaver` and `HelixStore`: a LangGraph checkpointer and store.
- `helix_es.integrations.openai_agents.HelixSession`: an OpenAI Agents SDK session.
"""
