from elasticsearch import Elasticsearch

StackEnv = dict[str, str]


def test_index_and_search_a_document(stack_env: StackEnv, unique: str) -> None:
    es = Elasticsearch(stack_env["ELASTICSEARCH_URL"])
    index = f"test-{unique}"
    try:
        es.index(
            index=index,
            id="42",
            document={"message": "the train was late again", "stars": 2},
            refresh="wait_for",
        )
        hits = es.search(index=index, query={"match": {"message": "late"}})["hits"]["hits"]
        assert [(h["_id"], h["_source"]["stars"]) for h in hits] == [("42", 2)]
    finally:
        es.indices.delete(index=index, ignore_unavailable=True)
        es.close()
