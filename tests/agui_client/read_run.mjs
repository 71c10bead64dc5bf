// Reads one AG-UI run with the AG-UI project's own client (@ag-ui/client), as a frontend
// would, and prints what it saw as JSON: the events, the state it holds at the end (rebuilt
// from STATE_SNAPSHOT and the STATE_DELTA patches), the result and the messages.
// Usage: node read_run.mjs URL TOKEN INITIAL_STATE_JSON USER_TEXT
import { HttpAgent } from "@ag-ui/client";

const [url, token, stateJson, text] = process.argv.slice(2);
const agent = new HttpAgent({
  url,
  headers: { Authorization: `Bearer ${token}` },
  threadId: "thread-1",
  initialState: JSON.parse(stateJson),
  initialMessages: [{ id: "m1", role: "user", content: text }],
});
const events = [];
try {
  const { result, newMessages } = await agent.runAgent(
    { runId: "run-1" },
    { onEvent: ({ event }) => { events.push(event); } },
  );
  console.log(JSON.stringify({ events, state: agent.state, result, messages: newMessages }));
} catch (error) {
  console.log(JSON.stringify({ events, error: String(error && error.message || error) }));
  process.exit(1);
}
