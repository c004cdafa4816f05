/**
 * Issue 13 item 3: error messages that tell the fix. A grant on an object that does not exist (a typo such as
 * content:nope) would never match a request: it is refused with 400 naming what exists.
 */
import { bootPlatform, type TestPlatform } from "../helpers/platform";
import { errorBody } from "../helpers/auth";

let p: TestPlatform;
let root: string;

beforeAll(async () => {
	p = await bootPlatform();
	root = await p.rootToken();
});
afterAll(() => p.cleanup());

const grant = (object: string) => p.http("POST", "/auth/grants", { token: root, body: { subject: `@editor@${p.root.domain}`, action: "read", object } });

describe("grants on unknown objects", () => {
	test("an unknown collection of a known service: 400 listing the service's collections", async () => {
		const r = await grant("content:nope");
		expect(r.status).toBe(400);
		expect(r.body).toEqual(
			errorBody(400, expect.stringMatching(/^object: 'content:nope' is not a collection \(collections of content: [a-z-]+(, [a-z-]+)*; or content:\* for all\)$/)),
		);
		expect(r.body.message).toContain("notes");
	});

	test("an unknown service: 400 listing the services", async () => {
		const r = await grant("nope:notes");
		expect(r.status).toBe(400);
		expect(r.body).toEqual(errorBody(400, expect.stringMatching(/^object: unknown service 'nope' \(services: auth, domain, .*content.*\)$/)));
	});

	test("a known collection and a service wildcard are accepted", async () => {
		expect((await grant("content:notes")).status).toBe(200);
		expect((await grant("content:*")).status).toBe(200);
	});

	test("a PATCH of a grant checks the object too", async () => {
		const created = await grant("content:notes");
		const r = await p.http("PATCH", `/auth/grants/${created.body.data.id}`, { token: root, body: { object: "content:notez" } });
		expect(r.status).toBe(400);
		expect(r.body.message).toMatch(/^object: 'content:notez' is not a collection/);
	});
});
