/**
 * logistic: the standard collection pattern on every collection of the domain (catalog/domains/logistic.ts), and
 * `resolve` on locations (nearest or text match) and travels (distance, duration, path).
 */
import type { ServiceSchema } from "moleculer";
import { logistic } from "../catalog/domains/logistic";
import { collectionMixin } from "../engine/collection.mixin";
import { resolveLocation, resolveTravel } from "./logistic/resolve";
import { searchableMixin } from "./search/searchable";

// The collection mixin last: its `started` (stores) runs before the search index's (locations' text resolve).
const LogisticService: ServiceSchema = {
	name: "logistic",
	mixins: [
		searchableMixin(logistic, ["locations"]),
		collectionMixin(logistic, { locations: { specials: { resolve: resolveLocation } }, travels: { specials: { resolve: resolveTravel } } }),
	],
};

export default LogisticService;
