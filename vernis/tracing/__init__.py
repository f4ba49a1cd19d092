"""Traces (SPEC §22): one answer as a tree of OpenTelemetry spans, sent over OTLP/HTTP when
`OTEL_EXPORTER_OTLP_ENDPOINT` is set (every other standard `OTEL_*` variable applies too).

    invoke_agent                 one per answer (`vernis.tracing.spans.Tracing.answer`)
    ├── chat <model>             one per model call (`vernis.model.traced.traced_model`)
    ├── execute_tool <tool>      one per tool run (`vernis.tracing.spans.tool_span`); approvals,
    │                            reviews and questions are its events
    └── chat <model>

Names and attributes are the OpenTelemetry GenAI semantic conventions' (`gen_ai.*`); Vernis's own
are `vernis.*`. No message text, tool arguments or results unless `VERNIS_TRACE_CONTENT=1`.

`spans` imports nothing of Vernis: the tools use it (the tool span, the `traceparent` of MCP
servers' and toolkits' HTTP requests), and so does the wrapper of the chat model, which sits beside
the models (`vernis.model.traced`).

Off (no endpoint), nothing is wrapped: an answer costs a context-variable lookup per model call and
per tool run, and a streamed delta nothing at all.
"""
