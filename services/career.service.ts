/** career: the standard collection pattern on every collection of the domain (catalog/domains/career.ts). */
import type { ServiceSchema } from "moleculer";
import { career } from "../catalog/domains/career";
import { collectionMixin } from "../mixins/collection.mixin";

const CareerService: ServiceSchema = { name: "career", mixins: [collectionMixin(career)] };

export default CareerService;
