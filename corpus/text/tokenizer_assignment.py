"""Which word tokenizer FineWeb-2 split each language with, by language key (`fra_Latn`).

The table is datatrove's `assets/tokenizer_assignment.csv` (datatrove 0.10.1, Apache-2.0), the assignment
FineWeb-2's filters counted words with: spaCy's tokenizer of the language or of a proxy language (`spacy:fr` for
Walloon), Indic NLP's trivial tokenizer, a segmenter library for scripts written without spaces (named by script:
`Thai`, `Hang` …), or Stanza's neural tokenizer. Every key it does not list is split by spaCy's multi-language
tokenizer (`spacy:xx`), as datatrove's `WhitespaceTokenizer` splits words too. Where a key is listed twice in the
CSV, its first row counts, as in datatrove.
"""

from __future__ import annotations

from functools import cache

DEFAULT = "spacy:xx"

# tokenizer, then the language keys it splits; a line without a tokenizer goes on with the one before.
_ASSIGNMENT = """
    Hang kor_Hang
    Khmr cmo_Khmr khm_Khmr
    Laoo lao_Laoo ncq_Laoo
    Mymr blk_Mymr ksw_Mymr kyu_Mymr mnw_Mymr mya_Mymr shn_Mymr
    Thai bzi_Thai kxm_Thai lcp_Thai msa_Thai nod_Thai pww_Thai tha_Thai urk_Thai
    Tibt bod_Tibt dzo_Tibt lbj_Tibt
    indic:as asm_Beng
    indic:bn ben_Beng bpy_Beng syl_Beng
    indic:gu guj_Gujr
    indic:hi anp_Deva bho_Deva brx_Deva ghe_Deva hin_Deva kle_Deva lif_Deva mag_Deva mai_Deva new_Deva rav_Deva
    rjs_Deva sck_Deva suz_Deva taj_Deva thl_Deva xsr_Deva
    indic:kK gom_Deva kex_Deva
    indic:kn kan_Knda tcy_Knda
    indic:ml mal_Mlym
    indic:mr kas_Deva mar_Deva snd_Deva
    indic:ne awa_Deva dty_Deva hne_Deva mup_Deva nep_Deva npi_Deva
    indic:or ori_Orya ory_Orya
    indic:pa pan_Guru
    indic:sa san_Deva
    indic:si sin_Sinh
    indic:ta tam_Taml
    indic:te kff_Telu tel_Telu wsg_Telu
    indic:ur bcc_Arab ckb_Arab glk_Arab hac_Arab kas_Arab kur_Arab lki_Arab lrc_Arab mzn_Arab pbt_Arab pnb_Arab
    pus_Arab sdh_Arab skr_Arab snd_Arab urd_Arab
    spacy:af afr_Latn
    spacy:am amh_Ethi sgw_Ethi
    spacy:ar acm_Arab aeb_Arab ajp_Arab apc_Arab ara_Arab arb_Arab arq_Arab ars_Arab ary_Arab arz_Arab ayp_Arab
    shu_Arab
    spacy:az aym_Latn azj_Latn
    spacy:bg bul_Cyrl
    spacy:ca cat_Latn
    spacy:cs ces_Latn
    spacy:da dan_Latn
    spacy:de bar_Latn deu_Latn gsw_Latn hrx_Latn swg_Latn
    spacy:dsb dsb_Latn
    spacy:el ell_Grek pnt_Grek
    spacy:en eng_Latn frr_Latn fry_Latn sco_Latn stq_Latn
    spacy:es arg_Latn ast_Latn cos_Latn ext_Latn lad_Latn mwl_Latn oci_Latn sdc_Latn spa_Latn srd_Latn
    spacy:et ekk_Latn est_Latn vro_Latn
    spacy:eu eus_Latn
    spacy:fa azb_Arab fas_Arab
    spacy:fi fin_Latn fit_Latn fkv_Latn krl_Latn liv_Latn lud_Latn olo_Latn vep_Latn vot_Latn
    spacy:fo fao_Latn
    spacy:fr fra_Latn frp_Latn fur_Latn lld_Latn nrf_Latn nrm_Latn pcd_Latn roh_Latn wln_Latn
    spacy:ga gle_Latn
    spacy:grc grc_Grek
    spacy:he heb_Hebr
    spacy:hr hrv_Latn
    spacy:hsb hsb_Latn
    spacy:hu hun_Latn
    spacy:hy hye_Armn
    spacy:id ind_Latn
    spacy:is isl_Latn
    spacy:it ita_Latn nap_Latn scn_Latn
    spacy:ja jpn_Jpan
    spacy:ky kir_Cyrl
    spacy:la lat_Latn
    spacy:lb ksh_Latn ltz_Latn pdc_Latn pfl_Latn
    spacy:lg cgg_Latn guz_Latn gwr_Latn hav_Latn hay_Latn kin_Latn koo_Latn kuj_Latn lsm_Latn lug_Latn lwg_Latn
    myx_Latn nnb_Latn nuj_Latn nyn_Latn nyo_Latn rub_Latn run_Latn shr_Latn sxb_Latn tlj_Latn ttj_Latn xog_Latn
    spacy:lij lij_Latn lmo_Latn pms_Latn vec_Latn
    spacy:lt lit_Latn
    spacy:lv lav_Latn ltg_Latn lvs_Latn prg_Latn sgs_Latn
    spacy:mk mkd_Cyrl
    spacy:ms aai_Latn aaz_Latn abs_Latn abx_Latn ace_Latn adz_Latn agn_Latn agt_Latn agw_Latn aia_Latn aji_Latn
    akb_Latn alj_Latn alp_Latn amk_Latn aoz_Latn apb_Latn apr_Latn atq_Latn att_Latn aui_Latn ban_Latn bbc_Latn
    bch_Latn bdd_Latn bew_Latn bgt_Latn bgz_Latn bhp_Latn bhw_Latn bhz_Latn bjn_Latn bjp_Latn blw_Latn blz_Latn
    bmk_Latn bnp_Latn bpr_Latn bps_Latn btd_Latn bth_Latn bts_Latn btx_Latn bug_Latn buk_Latn bvc_Latn bvd_Latn
    bwd_Latn bxh_Latn bzh_Latn cha_Latn chk_Latn dad_Latn dgc_Latn dhv_Latn dob_Latn drg_Latn dtb_Latn dtp_Latn
    duo_Latn dww_Latn ebk_Latn emi_Latn far_Latn fij_Latn frd_Latn fud_Latn gdg_Latn gfk_Latn gil_Latn haw_Latn
    heg_Latn hla_Latn hot_Latn hvn_Latn iba_Latn ibg_Latn ifa_Latn ifb_Latn ifk_Latn ifu_Latn ify_Latn ilo_Latn
    iry_Latn isd_Latn itv_Latn ivb_Latn ivv_Latn jae_Latn jav_Latn jra_Latn jvn_Latn kak_Latn kbm_Latn kei_Latn
    khz_Latn kij_Latn kje_Latn klv_Latn kmd_Latn kmk_Latn kne_Latn knx_Latn kos_Latn kpg_Latn kqf_Latn kqw_Latn
    ksc_Latn ksd_Latn ktm_Latn kud_Latn kwd_Latn kwf_Latn kzf_Latn law_Latn lbb_Latn lbk_Latn lcm_Latn leu_Latn
    lew_Latn lex_Latn lgl_Latn lid_Latn ljp_Latn llg_Latn lnd_Latn loe_Latn lww_Latn mad_Latn mah_Latn mak_Latn
    max_Latn mbf_Latn mbh_Latn mee_Latn mek_Latn met_Latn meu_Latn mgm_Latn mhy_Latn min_Latn mkn_Latn mlg_Latn
    mlu_Latn mmo_Latn mmx_Latn mna_Latn mnb_Latn mox_Latn mpx_Latn mqj_Latn mqy_Latn mri_Latn mrq_Latn mrv_Latn
    msa_Latn mui_Latn mva_Latn mvn_Latn mvp_Latn mwc_Latn mwv_Latn myw_Latn mzz_Latn nak_Latn nfa_Latn nho_Latn
    nia_Latn nij_Latn niu_Latn nlg_Latn nmw_Latn npy_Latn nrm_narom_Latn nsn_Latn nss_Latn ntu_Latn nwi_Latn
    omb_Latn otd_Latn pag_Latn pam_Latn pau_Latn plt_Latn pma_Latn pmf_Latn pne_Latn pon_Latn ppk_Latn prf_Latn
    pri_Latn pse_Latn pss_Latn ptp_Latn ptu_Latn pwg_Latn rad_Latn rai_Latn rap_Latn rar_Latn rej_Latn rgu_Latn
    row_Latn rro_Latn rtm_Latn rug_Latn sas_Latn sbe_Latn sbl_Latn sda_Latn sdo_Latn sdq_Latn sgb_Latn sgz_Latn
    skg_Latn smk_Latn sml_Latn smo_Latn snc_Latn sps_Latn ssg_Latn stn_Latn sun_Latn swp_Latn sxn_Latn tah_Latn
    tbc_Latn tbk_Latn tbl_Latn tbo_Latn tdx_Latn tet_Latn tgo_Latn tgp_Latn tih_Latn tiy_Latn tkl_Latn tnk_Latn
    tnn_Latn tnp_Latn ton_Latn tpa_Latn tpz_Latn tte_Latn tuc_Latn tvk_Latn tvl_Latn twu_Latn txq_Latn ubr_Latn
    upv_Latn uvl_Latn viv_Latn wat_Latn wed_Latn wew_Latn whk_Latn wls_Latn wuv_Latn xbr_Latn xmm_Latn xmv_Latn
    xnn_Latn xsb_Latn xsi_Latn yap_Latn yka_Latn yml_Latn zsm_Latn
    spacy:nb nno_Latn nob_Latn nor_Latn
    spacy:nl gos_Latn lim_Latn nds_Latn nld_Latn pdt_Latn vls_Latn zea_Latn
    spacy:pl csb_Latn pol_Latn szl_Latn
    spacy:pt por_Latn
    spacy:ro ron_Latn rup_Latn
    spacy:ru rue_Cyrl rus_Cyrl
    spacy:sk slk_Latn
    spacy:sl slv_Latn
    spacy:sq aln_Latn als_Latn san_Latn sqi_Latn
    spacy:sr bos_Latn ckm_Latn cnr_Latn hbs_Latn srp_Cyrl srp_Latn
    spacy:sv swe_Latn
    spacy:ti tig_Ethi tir_Ethi
    spacy:tl atd_Latn bcl_Latn bgs_Latn bkd_Latn bku_Latn bnj_Latn bno_Latn ceb_Latn cgc_Latn clu_Latn due_Latn
    fil_Latn gor_Latn hil_Latn hnn_Latn kqe_Latn krj_Latn mbb_Latn mbd_Latn mbi_Latn mbs_Latn mbt_Latn mmn_Latn
    mog_Latn mrw_Latn msb_Latn msk_Latn msm_Latn mta_Latn obo_Latn plw_Latn suc_Latn syb_Latn tbw_Latn tsg_Latn
    twb_Latn war_Latn
    spacy:tn aba_Latn abi_Latn abn_Latn acd_Latn ada_Latn ade_Latn adj_Latn aha_Latn ajg_Latn akp_Latn ald_Latn
    ann_Latn anv_Latn any_Latn asg_Latn atg_Latn ati_Latn avn_Latn bas_Latn bav_Latn bba_Latn bbj_Latn bbk_Latn
    bci_Latn bem_Latn beq_Latn bfd_Latn bfo_Latn bim_Latn bin_Latn biv_Latn bkv_Latn blh_Latn bmq_Latn bmv_Latn
    bom_Latn bov_Latn box_Latn bsq_Latn bss_Latn btt_Latn bud_Latn bum_Latn bwu_Latn byv_Latn cce_Latn chw_Latn
    cjk_Latn cko_Latn cme_Latn cwe_Latn dag_Latn dga_Latn dgi_Latn dhm_Latn dig_Latn diu_Latn dop_Latn dos_Latn
    dow_Latn dts_Latn dua_Latn dug_Latn dur_Latn dyi_Latn efi_Latn eka_Latn eko_Latn eto_Latn etu_Latn ewe_Latn
    ewo_Latn eza_Latn fal_Latn fan_Latn fon_Latn gaa_Latn gbo_Latn gbr_Latn gej_Latn gjn_Latn gkn_Latn gna_Latn
    gng_Latn gog_Latn gso_Latn gud_Latn gur_Latn guw_Latn gux_Latn gya_Latn hag_Latn heh_Latn her_Latn ibo_Latn
    idu_Latn ige_Latn ikk_Latn ikw_Latn ilb_Latn iqw_Latn iri_Latn ish_Latn iso_Latn izr_Latn izz_Latn jbu_Latn
    jmc_Latn kam_Latn kbp_Latn kcg_Latn kck_Latn kdc_Latn kde_Latn kdh_Latn kdl_Latn kdp_Latn ken_Latn kez_Latn
    khy_Latn kia_Latn kik_Latn kki_Latn kkj_Latn kma_Latn kmb_Latn kmy_Latn kng_Latn kny_Latn kon_Latn kqn_Latn
    kqo_Latn ksb_Latn ksf_Latn ktj_Latn kua_Latn kub_Latn kus_Latn kwn_Latn kwy_Latn kyf_Latn kzn_Latn lai_Latn
    lam_Latn las_Latn ldi_Latn lea_Latn lee_Latn lef_Latn leh_Latn lem_Latn lgm_Latn lin_Latn lip_Latn llb_Latn
    lmp_Latn lob_Latn lol_Latn loq_Latn loz_Latn lua_Latn lub_Latn lue_Latn lun_Latn maw_Latn mck_Latn mcp_Latn
    mcu_Latn mda_Latn mer_Latn mfq_Latn mgh_Latn mgo_Latn mgr_Latn mhw_Latn mnf_Latn mny_Latn mos_Latn mua_Latn
    muh_Latn mwn_Latn myk_Latn mzk_Latn mzm_Latn mzw_Latn naw_Latn nba_Latn nbl_Latn ncu_Latn ndc_Latn nde_Latn
    ndh_Latn ndi_Latn ndj_Latn ndo_Latn ndz_Latn nfr_Latn ngb_Latn ngc_Latn ngl_Latn ngp_Latn nhu_Latn nim_Latn
    nin_Latn nko_Latn nla_Latn nmz_Latn nnh_Latn nnq_Latn nnw_Latn nse_Latn nso_Latn ntr_Latn nwb_Latn nxd_Latn
    nya_Latn nyf_Latn nyk_Latn nyu_Latn nyy_Latn nza_Latn nzi_Latn ogo_Latn oke_Latn oku_Latn old_Latn ozm_Latn
    pem_Latn pfe_Latn phm_Latn pkb_Latn pny_Latn poy_Latn rim_Latn rnd_Latn rng_Latn ruf_Latn sbs_Latn sby_Latn
    seh_Latn sfw_Latn sig_Latn sil_Latn sld_Latn sna_Latn snw_Latn soe_Latn sop_Latn sot_Latn soy_Latn spp_Latn
    ssw_Latn suk_Latn swa_Latn swb_Latn swc_Latn swh_Latn swk_Latn tap_Latn tbz_Latn ted_Latn thk_Latn tik_Latn
    tiv_Latn tke_Latn tll_Latn tog_Latn toh_Latn toi_Latn tpm_Latn tsc_Latn tsn_Latn tso_Latn tsw_Latn tui_Latn
    tul_Latn tum_Latn twx_Latn umb_Latn urh_Latn uth_Latn vag_Latn ven_Latn vid_Latn vmk_Latn vmw_Latn vun_Latn
    vut_Latn wib_Latn wlx_Latn wmw_Latn wob_Latn wwa_Latn xho_Latn xon_Latn xrb_Latn xsm_Latn xuo_Latn yam_Latn
    yao_Latn yas_Latn yat_Latn yaz_Latn ybb_Latn yom_Latn zdj_Latn ziw_Latn zne_Latn zul_Latn
    spacy:tr crh_Latn gag_Latn tuk_Latn tur_Latn
    spacy:tt bak_Cyrl tat_Cyrl
    spacy:uk ukr_Cyrl
    spacy:vi bdq_Latn bru_Latn caq_Latn cmo_Latn kha_Latn vie_Latn wbm_Latn
    spacy:yo ife_Latn mkl_Latn yor_Latn
    spacy:zh cmn_Hani hak_Hani nan_Hani wuu_Hani yue_Hani zho_Hani
    stanza:be bel_Cyrl
    stanza:bxr bxr_Cyrl khk_Cyrl mon_Cyrl xal_Cyrl
    stanza:cop cop_Copt
    stanza:cu chu_Cyrl
    stanza:cy bre_Latn cor_Latn cym_Latn
    stanza:gd gla_Latn
    stanza:gl glg_Latn
    stanza:gv glv_Latn
    stanza:hbo hbo_Hebr
    stanza:hyw hyw_Armn
    stanza:kk kaa_Cyrl kaz_Cyrl krc_Cyrl kum_Cyrl nog_Cyrl
    stanza:kmr asm_Latn ben_Latn ccp_Latn diq_Latn gom_Latn guj_Latn hif_Latn hin_Latn hns_Latn kas_Latn kiu_Latn
    kmr_Latn mar_Latn nep_Latn npi_Latn ori_Latn ory_Latn pan_Latn rhg_Latn rmc_Latn rml_Latn rmn_Latn rmo_Latn
    rmy_Latn snd_Latn syl_Latn tly_Latn urd_Latn
    stanza:lzh lzh_Hani
    stanza:mt arb_Latn mlt_Latn
    stanza:myv mdf_Cyrl myv_Cyrl
    stanza:pcm bis_Latn bzj_Latn djk_Latn gul_Latn hwc_Latn icr_Latn jam_Latn kri_Latn pcm_Latn pis_Latn rop_Latn
    srm_Latn srn_Latn tcs_Latn tpi_Latn wes_Latn
    stanza:se sju_Latn sma_Latn sme_Latn smj_Latn smn_Latn sms_Latn
    stanza:ug uig_Arab uzb_Arab uzs_Arab
    stanza:wo bqj_Latn bsc_Latn bsp_Latn cou_Latn csk_Latn cwt_Latn dyo_Latn ffm_Latn fub_Latn fue_Latn fuf_Latn
    fuh_Latn ful_Latn fuq_Latn fuv_Latn knf_Latn kqs_Latn krx_Latn kss_Latn lia_Latn snf_Latn srr_Latn tem_Latn
    tnr_Latn wol_Latn
"""


@cache
def tokenizer_assignment() -> dict[str, str]:
    """Language key -> the tokenizer FineWeb-2 assigned it (keys split by `spacy:xx` left out)."""
    assignment, tokenizer = {}, None
    for word in _ASSIGNMENT.split():
        if "_" in word:
            assignment[word] = tokenizer
        else:
            tokenizer = word
    return assignment


def assigned_tokenizer(key: str) -> str:
    """The tokenizer FineWeb-2 split words of language `key` with: `spacy:<code>`, `indic:<code>`,
    `stanza:<code>`, or a script's segmenter (`Thai`, `Hani` …)."""
    return tokenizer_assignment().get(key, DEFAULT)
