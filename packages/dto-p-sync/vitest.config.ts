import { kvcProject } from '../../vitest.shared.js'

export default kvcProject('dto-p-sync')
