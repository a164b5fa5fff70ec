"""The memory planner: will a planned fine-tune fit the pool? (issue 3)

architecture (model shapes from the catalog, a config.json or local safetensors headers) ->
run (method, dtypes, optimizer, framework defaults) -> estimate (terms and phases, pure) ->
budget (the live or recorded machine) -> verdict. ``command`` is the thin CLI layer.
"""
