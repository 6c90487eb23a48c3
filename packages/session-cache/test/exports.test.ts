import { describePublicSurface } from '../../../exportSurface.shared.js'
import * as api from '../src/index.js'
import * as testing from '../src/testing/index.js'

// Pin the public surface (values and types): adding or removing an export is a deliberate,
// reviewed change to the snapshots beside this file.
describePublicSurface(import.meta.url, { index: api, testing })
