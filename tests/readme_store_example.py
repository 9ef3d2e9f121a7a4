"""The example of docs/integrations/langgraph-store.md, as printed there: tests/test_langgraph_store.py runs it."""

from helix_es.integrations.langgraph import HelixStore

config = {
    "store": {
        "namespace": "agent-memories",
        "index": {"embed": {"provider": "hash", "dims": 256}, "fields": ["text"]},
    }
}  # embedded log in .helix/log

with HelixStore.from_config(config) as store:
    store.put(("users", "u1"), "food", {"text": "likes spicy ramen", "kind": "preference"})
    store.put(("users", "u1"), "city", {"text": "lives in Oslo", "kind": "fact"})
    print(store.get(("users", "u1"), "city").value["text"])  # lives in Oslo
    print([i.key for i in store.search(("users",), filter={"kind": "fact"})])  # ['city']
    print(store.search(("users", "u1"), query="spicy ramen", limit=1)[0].key)  # food
    print(store.list_namespaces())  # [('users', 'u1')]
