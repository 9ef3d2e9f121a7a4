"""The example of docs/integrations/langgraph-checkpointer.md, as printed: tests/test_langgraph_saver.py runs it."""

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from helix_es.integrations.langgraph import HelixSaver


class State(TypedDict):
    steps: Annotated[list[str], operator.add]
    answer: str


def plan(state: State) -> dict[str, Any]:
    return {"steps": ["plan"]}


def ask(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "go ahead?"})  # pauses the run; Command(resume=...) answers
    return {"steps": [f"ask:{answer}"], "answer": answer}


def act(state: State) -> dict[str, Any]:
    return {"steps": [f"act:{state['answer']}"]}


builder = StateGraph(State)
builder.add_node("plan", plan)
builder.add_node("ask", ask)
builder.add_node("act", act)
builder.add_edge(START, "plan")
builder.add_edge("plan", "ask")
builder.add_edge("ask", "act")
builder.add_edge("act", END)

CONFIG = """
log: {type: embedded, path: .helix/log}
checkpoints: {store: memory, namespace: my-graph}
"""

if __name__ == "__main__":
    with HelixSaver.from_config(CONFIG) as saver:
        graph = builder.compile(checkpointer=saver)
        thread = {"configurable": {"thread_id": "order-42"}}
        paused = graph.invoke({"steps": [], "answer": ""}, thread)
        print(paused["__interrupt__"][0].value)  # {'question': 'go ahead?'}
        print(graph.invoke(Command(resume="yes"), thread))  # {'steps': ['plan', 'ask:yes', 'act:yes'], 'answer': 'yes'}
        history = list(graph.get_state_history(thread))  # newest first, each step a checkpoint on the log
        print([(s.metadata["step"], s.next) for s in history])
        before_act = next(s for s in history if s.next == ("act",))
        print(graph.invoke(None, before_act.config))  # replay from there: act runs again, on a fork
