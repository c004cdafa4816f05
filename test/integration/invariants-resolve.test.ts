/**
 * A special action neither returns nor uses a field outside the caller's view (docs/search.md, "POST
 * /logistic/locations/resolve"). `locations/resolve { lat, lng }` answered a `distance` computed from the coordinates
 * the caller's grant hides: three answers from three points give the hidden position away. Now it refuses like
 * `travels/resolve` (one shared check, services/caller-view.ts): where the grant's field list hides `lat` or `lng`,
 * the action cannot use them for any location, and answers 403 naming them (docs/security.md, "Special actions and
 * field lists").
 */
import { bootTenancy, ok, type Tenancy } from "../helpers/tenants";
import { errorBody } from "../helpers/auth";
import { sleep } from "../helpers/wait";

/** The shared refusal: the action, the grant whose field list hides the coordinates. */
const hidden = (grant: string) => errorBody(403, `resolve uses lat and lng, which your ${grant} grant on logistic:locations does not let you read`);

/** Three points around the hidden depot: trilateration needs no more. */
const POINTS = [
	{ lat: 0, lng: 0 },
	{ lat: 10, lng: 0 },
	{ lat: 0, lng: 10 },
];
const FIELDS = ["name", "address", "description", "tags"];

describe("coordinates the grant hides", () => {
	let t: Tenancy;
	let depot: { id: string; lat: number; lng: number };
	beforeAll(async () => {
		t = await bootTenancy();
		const { limited, admin } = t.a;
		// Tenant a's depot, shared with its limited user (default zones: own, share).
		depot = (await ok(t.as(admin.token, "POST", "/logistic/locations", { name: "hidden depot", address: "north gate", lat: 35.6892, lng: 51.389, shares: [limited.id] }), "depot"))
			.data;
		// The limited user reads locations without their coordinates, and may resolve, with the same field list.
		for (const [action, object] of [
			["read", "logistic:locations"],
			["resolve", "logistic:locations"],
			["resolve", "logistic:travels"],
		])
			await t.grant(admin.token, { subject: limited.subject, action, object, field: FIELDS });
	}, 180_000);
	afterAll(() => t?.cleanup());

	const resolve = (token: string, body: unknown) => t.as(token, "POST", "/logistic/locations/resolve", body);

	test("the limited user's view shows the depot, without lat and lng", async () => {
		const r = await ok(t.as(t.a.limited.token, "GET", `/logistic/locations/${depot.id}`), "get depot");
		expect(r.data).toMatchObject({ id: depot.id, name: "hidden depot" });
		expect(r.data).not.toHaveProperty("lat");
		expect(r.data).not.toHaveProperty("lng");
	});

	test("locations/resolve { lat, lng } answers no distance from hidden coordinates: 403 naming them, from any point", async () => {
		for (const point of POINTS) {
			const r = await resolve(t.a.limited.token, point);
			expect({ point, status: r.status, body: r.body }).toEqual({ point, status: 403, body: hidden("resolve") });
		}
		// The input is still checked first.
		expect((await resolve(t.a.limited.token, { lat: 91, lng: 0 })).body).toEqual(errorBody(400, "lat must be between -90 and 90"));
	});

	test("travels/resolve refuses the same way (the shared check): the depot's id is not a point the caller may use", async () => {
		const r = await t.as(t.a.limited.token, "POST", "/logistic/travels/resolve", { origin: depot.id, destination: POINTS[0] });
		expect(r.body).toEqual(hidden("read"));
		// Nor is the caller told whether hidden coordinates are valid (stored locations keep any number).
		const odd = (await ok(t.as(t.a.admin.token, "POST", "/logistic/locations", { name: "odd", lat: 200, lng: 0, shares: [t.a.limited.id] }), "odd")).data;
		const o = await t.as(t.a.limited.token, "POST", "/logistic/travels/resolve", { origin: odd.id, destination: POINTS[0] });
		expect(o.body).toEqual(hidden("read"));
		// A location outside the view is still not found, as for a foreign id.
		const foreign = "0123456789abcdef01234567";
		expect((await t.as(t.a.limited.token, "POST", "/logistic/travels/resolve", { origin: foreign, destination: POINTS[0] })).body).toEqual(
			errorBody(404, `location ${foreign} not found`),
		);
		expect((await t.as(t.a.admin.token, "POST", "/logistic/travels/resolve", { origin: odd.id, destination: POINTS[0] })).body).toEqual(
			errorBody(400, `location ${odd.id} has no valid coordinates`),
		);
	});

	test("a caller whose view shows the coordinates gets the distance; the text form still answers the limited user", async () => {
		const admin = await resolve(t.a.admin.token, POINTS[0]);
		expect(admin.status).toBe(200);
		expect(admin.body.data).toMatchObject({ id: depot.id, lat: depot.lat, lng: depot.lng, distance: expect.any(Number) });
		// The search index follows the write within milliseconds.
		let text = await resolve(t.a.limited.token, { query: "depot" });
		for (const end = Date.now() + 5000; text.status === 404 && Date.now() < end; await sleep(20)) text = await resolve(t.a.limited.token, { query: "depot" });
		expect(text.status).toBe(200);
		expect(text.body.data).toMatchObject({ id: depot.id, name: "hidden depot", score: expect.any(Number) });
		expect(text.body.data).not.toHaveProperty("lat");
		expect(text.body.data).not.toHaveProperty("distance");
	});
});
