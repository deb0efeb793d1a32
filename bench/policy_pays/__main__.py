from lookupkit.bench.policy_pays.run import main

main()
