/**
 * conjoint: the standard collection pattern on every collection of the domain (catalog/domains/conjoint.ts), message
 * search and the caller's account (`generate`).
 */
import type { ServiceSchema } from "moleculer";
import { conjoint } from "../catalog/domains/conjoint";
import { collectionMixin } from "../engine/collection.mixin";
import { generate } from "./conjoint/accounts";
import { searchableMixin, searchHandler } from "./search/searchable";

const MESSAGES = conjoint.collections.find((c) => c.name === "messages")!;

// The collection mixin last: its `started` (stores) runs before the search index's.
const ConjointService: ServiceSchema = {
	name: "conjoint",
	mixins: [
		searchableMixin(conjoint, ["messages"]),
		collectionMixin(conjoint, { messages: { specials: { search: searchHandler(MESSAGES) } }, accounts: { specials: { generate } } }),
	],
};

export default ConjointService;
