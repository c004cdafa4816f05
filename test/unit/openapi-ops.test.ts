/**
 * The OpenAPI document agrees with the server (issue "Operating it", item 9): the token endpoint's HTTP Basic client
 * authentication, the bulk body, `?ref=true`, the cursor's resume and end, requested scopes, the password rule, 415 on
 * JSON bodies; and docs/production.md's configuration of a node of one's own holds the platform's heartbeat values.
 * What docs/api.md promises of these is the server's behaviour, tested as such: test/integration/ops-messages.test.ts
 * (content types, 415, WWW-Authenticate, the password rule), ops-conformance.test.ts (bulk body, `?ref=true`),
 * firsthour-sse.test.ts (the end frame, Last-Event-ID).
 */
import { readFileSync } from "fs";
import path from "path";
import { openApiDocument } from "../../lib/openapi";
import { requestedScopeProblem } from "../../lib/oauth-form";
import { readConfig } from "../../runtime/config";

type Obj = Record<string, any>;
const doc = openApiDocument() as Obj;
const op = (p: string, method: string): Obj => doc.paths[p][method];
const resolve = (s: Obj): Obj => (s.$ref ? doc.components[s.$ref.split("/")[2]][s.$ref.split("/")[3]] : s);
const read = (name: string) => readFileSync(path.join(__dirname, "../../docs", name), "utf8");
const section = (text: string, heading: string) => text.slice(text.indexOf(heading), text.indexOf("\n## ", text.indexOf(heading) + heading.length));

describe("the OpenAPI document", () => {
	test("POST /auth/token: public, or HTTP Basic client authentication (RFC 6749 §2.3.1)", () => {
		expect(op("/auth/token", "post").security).toEqual([{}, { clientBasic: [] }]);
		expect(doc.components.securitySchemes.clientBasic).toMatchObject({ type: "http", scheme: "basic" });
		// Only there: every other public operation has no security at all.
		expect(op("/special/files/{id}/download", "get").security).toEqual([]);
	});

	test("requested scopes carry the pattern the server checks", () => {
		const items = resolve(doc.components.schemas.TokenRequest).properties.scopes.items;
		const re = new RegExp(items.pattern);
		for (const s of ["whole", "read:content", "read:content:notes", "manage:content:*", "send:touch:emails"]) {
			expect({ s, pattern: re.test(s), server: requestedScopeProblem(s, "scopes[0]") }).toEqual({ s, pattern: true, server: null });
		}
		for (const s of ["bogus", "READ:content", "read:", "read:content:notes:x", "read:Content"]) {
			expect({ s, pattern: re.test(s), refused: requestedScopeProblem(s, "scopes[0]") !== null }).toEqual({ s, pattern: false, refused: true });
		}
	});

	test("a user's password: at least 8 characters, on create and patch", () => {
		for (const name of ["IdentityUsersCreate", "IdentityUsersPatch"]) {
			expect(doc.components.schemas[name].properties.password).toMatchObject({
				minLength: 8,
				writeOnly: true,
				description: expect.stringContaining("at least 8 characters (NIST SP 800-63B)"),
			});
		}
	});

	test("every operation with a JSON body lists 415; the bulk body is { items }", () => {
		for (const [p, method] of [
			["/content/notes", "post"],
			["/content/notes/{id}", "patch"],
			["/auth/token", "post"],
			["/auth/can", "post"],
		])
			expect({ p, method, has415: "415" in op(p, method).responses }).toEqual({ p, method, has415: true });
		expect("415" in op("/content/notes", "get").responses).toBe(false);
		const bulk = op("/content/notes/bulk", "post").requestBody.content["application/json"].schema;
		expect(bulk).toMatchObject({ type: "object", required: ["items"], properties: { items: { type: "array" } } });
		const ref = op("/content/notes/{id}", "get")
			.parameters.map(resolve)
			.find((x: Obj) => x.name === "ref");
		expect(ref).toMatchObject({ in: "query", schema: { enum: ["true", "false"] } });
	});

	test("the cursor: resume with Last-Event-ID, close the EventSource on end", () => {
		const description = op("/content/notes/cursor", "get").responses["200"].description;
		expect(description).toContain("Last-Event-ID");
		expect(description).toContain("close it on `event: end`");
	});
});

test("docs/production.md: a node of one's own keeps the platform's heartbeat, and how to add a service", () => {
	const own = section(read("production.md"), "## A service of your own");
	const cfg = readConfig();
	expect(own).toContain("`HEARTBEAT_TIMEOUT_MS`");
	expect(own).toContain(`heartbeatInterval: ${cfg.heartbeatIntervalMs / 1000}, heartbeatTimeout: ${cfg.heartbeatTimeoutMs / 1000}`);
	expect(own).toContain("Moleculer's default interval of 10 s");
	for (const step of ["catalog/domains/<name>.ts", "services/<name>.service.ts", "serviceCatalog"]) expect(own).toContain(step);
});
