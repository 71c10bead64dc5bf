// Two runs of one AG-UI thread with the AG-UI project's own client (@ag-ui/client), as a
// chat frontend makes them: the second after the first, with the user's next message.
// Prints each run's result and the messages the client holds at the end, as JSON.
// Usage: node two_runs.mjs URL TOKEN FIRST_TEXT SECOND_TEXT
import { HttpAgent } from "@ag-ui/client";

const [url, token, first, second] = process.argv.slice(2);
const agent = new HttpAgent({
  url,
  headers: { Authorization: `Bearer ${token}` },
  threadId: "thread-1",
  initialMessages: [{ id: "m1", role: "user", content: first }],
});
try {
  const one = await agent.runAgent({ runId: "run-1" });
  agent.addMessage({ id: "m2", role: "user", content: second });
  const two = await agent.runAgent({ runId: "run-2" });
  console.log(JSON.stringify({ results: [one.result, two.result], messages: agent.messages }));
} catch (error) {
  console.log(JSON.stringify({ error: String(error && error.message || error) }));
  process.exit(1);
}
