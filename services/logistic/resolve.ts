/**
 * logistic `resolve` (docs/contracts.md "Other special actions"):
 * - locations: `{ lat, lng }` → the nearest stored location of the caller's view, with `distance` in metres
 *   (haversine on a sphere of radius 6 371 008.8 m); `{ query }` → the location of the caller's view that best
 *   matches the text (the search index, lib/search.ts), with `score`.
 * - travels: `{ origin, destination, speed_kmh? }`, each a location id of the caller's view (read on
 *   logistic/locations) or `{ lat, lng }` → `{ distance, duration, path }`: great-circle metres, seconds at
 *   `speed_kmh` (default 50), the two points.
 * The nearest location is found by a scan of the caller's view in keyset batches (linear in the view's size; a
 * geospatial index would replace it for large fleets).
 * Both use coordinates only where the caller's view shows them (`usesCoordinates`, 403 otherwise): a special action
 * neither returns nor uses a field outside the caller's view.
 */
import { logistic } from "../../catalog/domains/logistic";
import { badRequest, notFound } from "../../lib/errors";
import { requirePlan, type AccessPlan } from "../../lib/plan";
import { present } from "../../lib/present";
import { parseQueryText } from "../../lib/search";
import { isPlainObject } from "../../lib/validate";
import { and, callerView } from "../../authority/authority";
import type { Ctx } from "../../engine/collection.mixin";
import type { DocumentStore } from "../../stores";
import { bestMatch } from "../search/searchable";
import { refuseHiddenUse } from "../caller-view";

const LOCATIONS = logistic.collections.find((c) => c.name === "locations")!;
const OBJECT_ID = /^[0-9a-f]{24}$/i;
const EARTH_RADIUS_M = 6_371_008.8;
const DEFAULT_SPEED_KMH = 50;
const SCAN_BATCH = 500;

type Svc = { collectionStore(name: string): DocumentStore };
export interface Point {
	lat: number;
	lng: number;
}

/** Great-circle distance in metres (haversine). */
export function haversine(a: Point, b: Point): number {
	const rad = Math.PI / 180;
	const dLat = (b.lat - a.lat) * rad;
	const dLng = (b.lng - a.lng) * rad;
	const h = Math.sin(dLat / 2) ** 2 + Math.cos(a.lat * rad) * Math.cos(b.lat * rad) * Math.sin(dLng / 2) ** 2;
	return 2 * EARTH_RADIUS_M * Math.asin(Math.min(1, Math.sqrt(h)));
}

/** `{ lat, lng }` within lat ±90, lng ±180; 400 naming the field otherwise. */
export function parsePoint(v: Record<string, unknown>, prefix = ""): Point {
	const extra = Object.keys(v).find((k) => k !== "lat" && k !== "lng");
	if (extra) throw badRequest(`${prefix}${extra} is not allowed`);
	const { lat, lng } = v;
	if (typeof lat !== "number" || !Number.isFinite(lat)) throw badRequest(`${prefix}lat must be a number`);
	if (typeof lng !== "number" || !Number.isFinite(lng)) throw badRequest(`${prefix}lng must be a number`);
	if (lat < -90 || lat > 90) throw badRequest(`${prefix}lat must be between -90 and 90`);
	if (lng < -180 || lng > 180) throw badRequest(`${prefix}lng must be between -180 and 180`);
	return { lat, lng };
}

const validPoint = (d: Record<string, unknown>): boolean => typeof d.lat === "number" && typeof d.lng === "number" && Math.abs(d.lat) <= 90 && Math.abs(d.lng) <= 180;

const metres = (m: number) => Math.round(m * 10) / 10;

/**
 * A distance from coordinates the caller's grant hides would give them away (three distances locate a point), and so
 * would the choice of the nearest location: both forms refuse 403 naming `lat`/`lng` where the grant's field list
 * leaves them out (../caller-view.ts).
 */
const COORDINATES = ["lat", "lng"];
const usesCoordinates = (view: AccessPlan, grant: string) => refuseHiddenUse(view, { action: "resolve", grant, object: "logistic:locations", fields: COORDINATES });

export async function resolveLocation(ctx: Ctx): Promise<{ data: Record<string, unknown> }> {
	const plan = requirePlan(ctx.locals);
	const body = ctx.params.body;
	if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
	const store = (ctx.service as unknown as Svc).collectionStore("locations");
	if ("query" in body) {
		const extra = Object.keys(body).find((k) => k !== "query");
		if (extra) throw badRequest(`${extra} is not allowed with query`);
		const text = parseQueryText(body.query, "query");
		const best = await bestMatch(ctx, LOCATIONS, text);
		if (!best) throw notFound("no location matches the query");
		return { data: { ...present(LOCATIONS, best.doc, plan.fields), score: Math.round(best.score * 1e6) / 1e6 } };
	}
	if (!("lat" in body) && !("lng" in body)) throw badRequest("lat and lng, or query, are required");
	const from = parsePoint(body);
	usesCoordinates(plan, "resolve");
	let best: { doc: Record<string, unknown> & { id: string }; d: number } | null = null;
	let last = "";
	for (;;) {
		const query = and([plan.filter, { lat: { $exists: true }, lng: { $exists: true } }, ...(last ? [{ id: { $gt: last } }] : [])]);
		const batch = await store.find({ query, sort: { id: 1 }, limit: SCAN_BATCH });
		for (const doc of batch) {
			if (!validPoint(doc)) continue;
			const d = haversine(from, { lat: doc.lat as number, lng: doc.lng as number });
			if (!best || d < best.d) best = { doc, d };
		}
		if (batch.length < SCAN_BATCH) break;
		last = batch[batch.length - 1].id;
	}
	if (!best) throw notFound("no location with coordinates found");
	return { data: { ...present(LOCATIONS, best.doc, plan.fields), distance: metres(best.d) } };
}

/** An end of a travel: a location id of the caller's view (read on logistic/locations), or `{ lat, lng }`. */
async function endOf(ctx: Ctx, name: string, v: unknown): Promise<Point> {
	if (isPlainObject(v)) return parsePoint(v, `${name}.`);
	if (typeof v !== "string" || !OBJECT_ID.test(v)) throw badRequest(`${name} must be a location id or { lat, lng }`);
	const view = await callerView(ctx, "logistic", "locations", "read", v);
	const doc = await (ctx.service as unknown as Svc).collectionStore("locations").findOne(view.filter);
	if (!doc) throw notFound(`location ${v} not found`);
	// Coordinates the caller's grant hides are not used, nor is it told whether they are valid.
	usesCoordinates(view, "read");
	if (!validPoint(doc)) throw badRequest(`location ${v} has no valid coordinates`);
	return { lat: doc.lat as number, lng: doc.lng as number };
}

export async function resolveTravel(ctx: Ctx): Promise<{ data: { distance: number; duration: number; path: Point[] } }> {
	const body = ctx.params.body;
	if (!isPlainObject(body)) throw badRequest("body must be a JSON object");
	const extra = Object.keys(body).find((k) => !["origin", "destination", "speed_kmh"].includes(k));
	if (extra) throw badRequest(`${extra} is not allowed`);
	if (body.origin === undefined) throw badRequest("origin is required");
	if (body.destination === undefined) throw badRequest("destination is required");
	const speed = body.speed_kmh ?? DEFAULT_SPEED_KMH;
	if (typeof speed !== "number" || !Number.isFinite(speed) || speed <= 0 || speed > 100_000) throw badRequest("speed_kmh must be a number above 0 and at most 100000");
	const origin = await endOf(ctx, "origin", body.origin);
	const destination = await endOf(ctx, "destination", body.destination);
	const distance = haversine(origin, destination);
	return { data: { distance: metres(distance), duration: Math.round(distance / (speed / 3.6)), path: [origin, destination] } };
}
