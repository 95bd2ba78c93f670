"""broker.conf keys: which are known, and a warning (once per key) for one that is not.

RocketMQ ignores a key it does not know, so a misspelt ``listenPor=10911`` silently leaves the
port at its default. ``serve`` warns once per unknown key, naming the nearest known one. Known
are the keys of RocketMQ 4.9.7's and 5.3's ``BrokerConfig``, ``MessageStoreConfig``,
``NettyServerConfig`` and ``NettyClientConfig`` (their property names, listed below), plus every
key rocketstore itself reads (``StoreConfig`` fields in camelCase and the broker's own).
"""
from __future__ import annotations

import difflib
from typing import Iterable

ROCKETMQ_KEYS = frozenset("""
    accessMessageInMemoryHotRatio accessMessageInMemoryMaxRatio accountStatsEnable
    accountStatsPrintZeroValues ackMessageThreadPoolNums ackThreadPoolQueueCapacity aclEnable
    adminBrokerThreadPoolNums adminBrokerThreadPoolQueueCapacity allAckInSyncStateSet
    allowRecallWhenBrokerNotWriteable appendAckAsync appendCkAsync asyncLearner asyncSendEnable
    autoCreateSubscriptionGroup autoCreateTopicEnable autoDeleteUnusedStats
    autoMessageVersionOnTopicLen batchDispatchRequestThreadPoolNums bindAddress
    bitMapLengthConsumeQueueExt bottomMostCompressionTypeForConsumeQueueStore
    broadcastOffsetExpireMaxSecond broadcastOffsetExpireSecond brokerClusterName
    brokerConfigPath brokerElectionPriority brokerFastFailureEnable brokerHeartbeatInterval
    brokerIP1 brokerIP2 brokerId brokerName brokerNotActiveTimeoutMillis brokerPermission
    brokerRole brokerTopicEnable cgColdReadThreshold channelExpiredTimeout
    channelNotActiveInterval checkCRCOnRecover checkSyncStateSetPeriod cleanFileForciblyEnable
    cleanOfflineBrokerInterval cleanResourceInterval cleanRocksDBDirtyCQIntervalMin
    cleanSwapedMapInterval clearRetryTopicWhenDeleteTopic clientAsyncSemaphoreValue
    clientCallbackExecutorThreads clientChannelMaxIdleTimeSeconds clientCloseSocketIfTimeout
    clientManageThreadPoolNums clientManagerThreadPoolQueueCapacity clientOnewaySemaphoreValue
    clientPooledByteBufAllocatorEnable clientSocketRcvBufSize clientSocketSndBufSize
    clientWorkerThreads clusterTopicEnable coldCtrStrategyEnable coldDataFlowControlEnable
    coldDataScanEnable commercialBaseCount commercialBigCount commercialEnable
    commercialSizePerMsg commercialTimerCount commercialTransCount commitCommitLogLeastPages
    commitCommitLogThoroughInterval commitIntervalCommitLog commitLogForceSwapMapInterval
    commitLogSwapMapInterval commitLogSwapMapReserveFileNum compactionCqMappedFileSize
    compactionMappedFileSize compactionScheduleInternal compactionThreadNum
    compatibleWithOldNameSrv compressedRegister configBlackList configManagerVersion
    connectTimeoutMillis consumerFallbehindThreshold consumerManageThreadPoolNums
    consumerManagerThreadPoolQueueCapacity consumerOffsetUpdateVersionStep controllerAddr
    controllerHeartBeatTimeoutMills correctLogicMinOffsetForceInterval
    correctLogicMinOffsetSleepInterval dLegerGroup dLegerPeers dLegerSelfId dataReadAheadEnable
    debugLockEnable defaultMessageRequestMode defaultPopShareQueueNum defaultQueryMaxNum
    defaultTopicQueueNums delayOffsetUpdateVersionStep deleteCommitLogFilesInterval
    deleteConsumeQueueFilesInterval deleteFileBatchMax deleteWhen
    destroyMapedFileIntervalForcibly disableCallbackExecutor disableConsumeIfConsumerReadSlowly
    disableNettyWorkerGroup disappearTimeAfterStart diskFallRecorded diskMaxUsedSpaceRatio
    diskSpaceCleanForciblyRatio diskSpaceWarningLevelRatio dispatchCqCacheNum dispatchCqThreads
    dispatchFromSenderThread duplicationEnable enableAsyncReput enableAutoInSyncReplicas
    enableBatchPush enableBroadcastOffsetStore enableBuildConsumeQueueConcurrently
    enableCalcFilterBitMap enableCleanExpiredOffset enableCompaction enableConsumeQueueExt
    enableControllerMode enableCreateSysGroup enableDLegerCommitLog enableDetailStat
    enableFastChannelEventProcess enableLmq enableLmqStats enableMixedMessageType
    enableMultiDispatch enableNetWorkFlowControl enableNotifyAfterPopOrderLockRelease
    enableNotifyBeforePopCalculateLag enablePopBatchAck enablePopBufferMerge enablePopLog
    enablePopMessageThreshold enablePropertyFilter enableReconnectForGoAway
    enableRegisterProducer enableRemoteEscape enableRetryTopicV2 enableRocksDBLog
    enableScheduleAsyncDeliver enableScheduleMessageStats enableShutdownGracefully
    enableSingleTopicRegister enableSkipLongAwaitingAck enableSlaveActingMaster
    enableSplitRegistration enabledAppendPropCRC endTransactionPoolQueueCapacity
    endTransactionThreadPoolNums estimateAccumulation expectConsumerNumUseFilter
    fastFailIfNoBufferInStorePool fetchControllerAddrByDnsLookup fetchNameSrvAddrByDnsLookup
    fetchNamesrvAddrByAddressServer fetchNamesrvAddrInterval fileReservedTime
    filterDataCleanTimeSpan filterServerNums filterSupportRetry flushCommitLogLeastPages
    flushCommitLogThoroughInterval flushCommitLogTimed flushConsumeQueueLeastPages
    flushConsumeQueueThoroughInterval flushConsumerOffsetHistoryInterval
    flushConsumerOffsetInterval flushDelayOffsetInterval flushDiskType flushIntervalCommitLog
    flushIntervalConsumeQueue flushLeastPagesWhenWarmMapedFile forceRegister forceVerifyPropCRC
    forwardTimeout globalColdReadThreshold haFlowControlEnable haHousekeepingInterval
    haListenPort haMasterAddress haMaxGapNotInSync haMaxTimeSlaveNotCatchup
    haSendHeartbeatInterval haSlaveFallbehindMax haTransferBatchSize heartbeatThreadPoolNums
    heartbeatThreadPoolQueueCapacity highSpeedMode inSyncReplicas initPopOffsetByCheckMsgInMem
    isEnableBatchPush isScanAvailableNameSrv isolateLogEnable listenPort litePullMessageEnable
    litePullMessageThreadPoolNums litePullThreadPoolQueueCapacity
    loadBalancePollNameServerInterval loadBalanceProcessorThreadPoolNums
    loadBalanceThreadPoolQueueCapacity lockInStrictMode logicQueueForceSwapMapInterval
    logicQueueSwapMapInterval logicQueueSwapMapReserveFileNum
    logicalDiskSpaceCleanForciblyThreshold longPollingEnable mappedFileSizeCommitLog
    mappedFileSizeConsumeQueue mappedFileSizeConsumeQueueExt mappedFileSizeTimerLog
    mappedFileSwapEnable mapperFileSizeBatchConsumeQueue maxAsyncPutMessageRequests
    maxBatchDeleteFilesNum maxChecksumRange maxConsumeQueueScan maxDelayTime
    maxErrorRateOfBloomFilter maxFilterMessageSize maxHaTransferByteInSecond maxHashSlotNum
    maxIndexNum maxLmqConsumeQueueNum maxMessageSize maxMsgsNumBatch maxOffsetMapSize
    maxPopPollingSize maxReconnectIntervalTimeSeconds maxRecoveryCommitlogFiles
    maxSlaveResendLength maxStatsIdleTimeInMinutes maxTopicLength
    maxTransferBytesOnMessageInDisk maxTransferBytesOnMessageInMemory
    maxTransferCountOnMessageInDisk maxTransferCountOnMessageInMemory memTableFlushIntervalMs
    messageDelayLevel messageIndexEnable messageIndexSafe messageStorePlugIn
    metricGrpcExporterIntervalInMills metricGrpcExporterTimeOutInMills
    metricLoggingExporterIntervalInMills metricsExporterType metricsGrpcExporterHeader
    metricsGrpcExporterTarget metricsInDelta metricsLabel metricsOtelCardinalityLimit
    metricsPromExporterHost metricsPromExporterPort minInSyncReplicas msgTraceTopicName
    namesrvAddr notifyConsumerIdsChangedEnable offsetCheckInSlave osPageCacheBusyTimeOutMills
    popCkMaxBufferSize popCkOffsetMaxQueueSize popCkStayBufferTime popCkStayBufferTimeOut
    popConsumerFSServiceInit popConsumerKVServiceEnable popConsumerKVServiceInit
    popConsumerKVServiceLog popFromRetryProbability popInflightMessageThreshold
    popLongPollingForceNotifyInterval popPollingMapSize popPollingSize
    popResponseReturnActualRetryTopic popReviveMaxAttemptTimes popReviveMaxReturnSizePerRead
    preferredLeaderId printChannelGroups printChannelGroupsMinNum
    processReplyMessageThreadPoolNums pullBatchMaxMessageCount pullMessageThreadPoolNums
    pullThreadPoolQueueCapacity putConsumeQueueDataByFileChannel putMessageFutureThreadPoolNums
    putMessageTimeout putMsgIndexHightWater putThreadPoolQueueCapacity
    queryMessageThreadPoolNums queryThreadPoolQueueCapacity readOnlyCommitLogStorePaths
    readUnCommitted realTimeNotifyConsumerChange realTimePersistRocksDBConfig
    recallMessageEnable recheckReputOffsetFromCq recoverConcurrently recoverThreadPoolNums
    redeleteHangedFileInterval regionId registerBrokerTimeoutMills registerNameServerPeriod
    rejectPullConsumerEnable rejectTransactionMessage replicasPerDiskPartition
    replyThreadPoolQueueCapacity retrieveMessageFromPopRetryTopicV1 reviveAckWaitMs
    reviveInterval reviveMaxSlow reviveQueueNum reviveScanTime rocketmqHome
    rocksdbCQDoubleWriteEnable rocksdbCompressionType rocksdbFlushWalFrequency
    rocksdbWalFileRollingThreshold sampleCountThreshold sampleSteps
    scheduleAsyncDeliverMaxPendingLimit scheduleAsyncDeliverMaxResendNum2Blocked
    searchBcqByCacheEnable sendHeartbeatTimeoutMillis sendMessageThreadPoolNums
    sendThreadPoolQueueCapacity serverAsyncSemaphoreValue serverCallbackExecutorThreads
    serverChannelMaxIdleTimeSeconds serverLoadBalancerEnable serverNettyWorkerGroupEnable
    serverOnewaySemaphoreValue serverPooledByteBufAllocatorEnable serverSelectorThreads
    serverSocketBacklog serverSocketRcvBufSize serverSocketSndBufSize serverWorkerThreads
    shortPollingTimeMills shutdownWaitTimeSeconds skipPreOnline skipWhenCKRePutReachMaxTimes
    slaveReadEnable slaveTimeout socksProxyConfig spinLockCollisionRetreatOptimalDegree
    splitRegistrationSize startAcceptSendRequestTimeStamp statRocksDBCQIntervalSec
    storePathBrokerIdentity storePathCommitLog storePathDLedgerCommitLog storePathEpochFile
    storePathRootDir storeReplyMessageEnable storeType subscriptionExpiredTimeout
    syncBrokerMemberGroupPeriod syncBrokerMetadataPeriod syncControllerMetadataPeriod
    syncFlushTimeout syncFromLastFile syncMasterFlushOffsetWhenStartup timerCheckMetricsWhen
    timerColdDataCheckIntervalMs timerCongestNumEachSlot timerEnableCheckMetrics
    timerEnableDisruptor timerEnableRetryUntilSuccess timerFlushIntervalMs
    timerGetMessageThreadNum timerInterceptDelayLevel timerMaxDelaySec timerMetricSmallThreshold
    timerPrecisionMs timerProgressLogIntervalMs timerPutMessageThreadNum timerRollWindowSlot
    timerSkipUnknownError timerStopDequeue timerStopEnqueue timerWarmEnable timerWheelEnable
    topicQueueLockNum totalReplicas traceOn traceTopicEnable transactionCheckInterval
    transactionCheckMax transactionMetricFlushInterval transactionOpBatchInterval
    transactionOpMsgMaxSize transactionTimeOut transferMsgByHeap transientStorePoolEnable
    transientStorePoolSize travelCqFileNumWhenGetMessage updateNameServerAddrPeriod useABSLock
    useEpollNativeSelector usePIDColdCtrStrategy useReentrantLockWhenPutMessage
    useServerSideResetOffset useStaticSubscription useTLS validateSystemTopicWhenUpdateTopic
    waitTimeMillsInAckQueue waitTimeMillsInAdminBrokerQueue waitTimeMillsInHeartbeatQueue
    waitTimeMillsInLitePullQueue waitTimeMillsInPullQueue waitTimeMillsInSendQueue
    waitTimeMillsInTransactionQueue wakeCommitWhenPutMessage wakeFlushWhenPutMessage
    warmMapedFileEnable writeBufferHighWaterMark writeBufferLowWaterMark
""".split())


def unknown_keys(keys: Iterable[str], ours: Iterable[str]) -> list[tuple[str, str | None]]:
    """(key, nearest known key or None) for each key neither RocketMQ nor rocketstore knows."""
    known = ROCKETMQ_KEYS | frozenset(ours)
    lower = {k.lower(): k for k in known}
    out = []
    for key in keys:
        if key in known:
            continue
        if key.lower() in lower:  # a case slip: listenport
            out.append((key, lower[key.lower()]))
            continue
        near = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        out.append((key, near[0] if near else None))
    return out
