// Checks a stream of AG-UI events (a JSON array on stdin) with the AG-UI client's own
// verifier, as HttpAgent applies it to every stream it reads; prints "ok" or the error.
import { verifyEvents } from "@ag-ui/client";
import { from, lastValueFrom, toArray } from "rxjs";

let input = "";
for await (const chunk of process.stdin) input += chunk;
try {
  await lastValueFrom(from(JSON.parse(input)).pipe(verifyEvents(), toArray()));
  console.log("ok");
} catch (error) {
  console.log(String(error && error.message || error));
  process.exit(1);
}
