/** Issue 13 item 12: docs/webhooks.md says what a GET of a CQRS config returns (never its credentials). */
import { readFileSync } from "fs";
import path from "path";

test("docs/webhooks.md does not claim that a GET returns the webhook credentials", () => {
	const text = readFileSync(path.resolve(__dirname, "../../docs/webhooks.md"), "utf8").replace(/\s+/g, " ");
	expect(text).not.toMatch(/GET` of the config still returns them/);
	expect(text).toContain("A `GET` returns the config's value without them");
});
