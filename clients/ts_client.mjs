// An independent MCP client on the official TypeScript SDK, used by wp-mcp's tests.
//
// It spawns `wp-mcp serve` over stdio, lists the tools, calls every tool, reads a resource,
// fetches a prompt and provokes the error cases, then prints one JSON object on stdout
// describing what it saw. The Python test asserts on that object.
//
// usage: node ts_client.mjs <graph file to import> -- <server command> [args…]

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const sep = process.argv.indexOf("--");
if (sep < 0 || sep + 1 >= process.argv.length || sep !== 3) {
  console.error("usage: node ts_client.mjs <graph file> -- <server command> [args…]");
  process.exit(2);
}
const graphFile = process.argv[2];
const [command, ...args] = process.argv.slice(sep + 1);

const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
const client = new Client({ name: "wp-mcp-ts-test-client", version: "1.0.0" });
await client.connect(transport);

const seen = { tools: [], calls: {}, errors: {}, progress: 0 };

function summarise(result) {
  const text = (result.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");
  return { isError: Boolean(result.isError), text, structured: result.structuredContent ?? null };
}

async function call(name, argsForTool, key = name, options = {}) {
  const result = await client.callTool({ name, arguments: argsForTool }, undefined, options);
  seen.calls[key] = summarise(result);
  return seen.calls[key];
}

const listed = await client.listTools();
seen.tools = listed.tools.map((t) => ({ name: t.name, annotations: t.annotations ?? null }));
seen.instructions = client.getInstructions() ?? "";

await call("wp_snapshots", {}, "wp_snapshots_empty");
const opened = await call("wp_open", { path: graphFile, label: "ts-first" });
const first = opened.structured?.snapshot_id;
const reopened = await call("wp_open", { path: graphFile, label: "ts-second" }, "wp_open_again");
const second = reopened.structured?.snapshot_id;
await call("wp_snapshots", {});
await call("wp_summary", { snapshot: first });
await call("wp_layer", { view: "interconnect", snapshot: first, max_tokens: 2000 });
await call("wp_entity", { id: "npu:0", snapshot: first });
await call("wp_search", { query: "python", snapshot: first });
const ran = await call("wp_run_skill", { skill: "bottleneck-identification", snapshot: first });
await call("wp_report", { report: ran.structured?.report_id ?? "latest" });
await call("wp_diff", { before: first, after: second });
await call("wp_skill_docs", {});
await call("wp_skill_docs", { skill: "hotspot-thread-discovery" }, "wp_skill_docs_one");
await call("wp_collect", { window_s: 0.2, ebpf: "off", label: "ts-live" }, "wp_collect", {
  onprogress: () => {
    seen.progress += 1;
  },
  timeout: 120000,
});

const resource = await client.readResource({ uri: `wp://snapshots/${first}/summary` });
seen.resource = resource.contents.map((c) => c.text ?? "").join("\n");
const prompt = await client.getPrompt({ name: "diagnose", arguments: { snapshot: first } });
seen.prompt = prompt.messages.map((m) => m.content.text ?? "").join("\n");

seen.errors.layer = summarise(await client.callTool({ name: "wp_layer", arguments: { view: "no-such-layer", snapshot: first } }));
seen.errors.snapshot = summarise(await client.callTool({ name: "wp_summary", arguments: { snapshot: "zzzz-none" } }));
seen.errors.path = summarise(await client.callTool({ name: "wp_open", arguments: { path: "/etc/passwd" } }));
seen.errors.argument = summarise(await client.callTool({ name: "wp_summary", arguments: { snapshot: first, colour: "red" } }));
seen.errors.cursor = summarise(await client.callTool({ name: "wp_report", arguments: { cursor: "bogus" } }));

await client.close();
process.stdout.write(JSON.stringify(seen) + "\n");
