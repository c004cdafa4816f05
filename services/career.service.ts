/** career: the standard collection pattern on every collection of the domain (catalog/domains/career.ts), and product search. */
import type { ServiceSchema } from "moleculer";
import { career } from "../catalog/domains/career";
import { collectionMixin } from "../engine/collection.mixin";
import { searchableMixin, searchHandler } from "./search/searchable";

const PRODUCTS = career.collections.find((c) => c.name === "products")!;

// The collection mixin last: its `started` (stores) runs before the search index's.
const CareerService: ServiceSchema = {
	name: "career",
	mixins: [searchableMixin(career, ["products"]), collectionMixin(career, { products: { specials: { search: searchHandler(PRODUCTS) } } })],
};

export default CareerService;
