// The official TypeScript SDK client calling the everything server's echo directly, for
// BenchmarkExecuteToolMCP: it connects (stdio: spawns the server; http: the URL), prints
// "ready", then for each line "N" on stdin makes N sequential calls and prints "done".
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import readline from "node:readline";

const [mode, target] = process.argv.slice(2);
const transport = mode === "http"
  ? new StreamableHTTPClientTransport(new URL(target))
  : new StdioClientTransport({ command: process.execPath, args: [target, "stdio"], stderr: "ignore" });
const client = new Client({ name: "bench", version: "1" });
await client.connect(transport);
console.log("ready");
const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const n = parseInt(line, 10);
  for (let i = 0; i < n; i++) {
    const res = await client.callTool({ name: "echo", arguments: { message: "hello" } });
    if (res.isError) throw new Error("echo failed");
  }
  console.log("done");
}
await client.close();
